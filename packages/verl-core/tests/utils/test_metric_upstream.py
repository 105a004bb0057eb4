"""``verl.utils.metric`` as upstream documents it: reduce_metrics by the name (max / min / mean), in place."""

import math

import numpy as np
import pytest
import torch
from verl.utils.metric import AggregationType, MetricList, MetricValue, reduce_metrics
from verl.utils.metric.utils import AggregationTypeMismatchError


def test_reduce_metrics_by_the_name_in_place():
    metrics = {
        "loss": [1.0, 2.0, 3.0],
        "accuracy": [0.8, 0.9, 0.7],
        "max_reward": [5.0, 8.0, 6.0],
        "min_error": [0.1, 0.05, 0.2],
        "grad": torch.tensor([1.0, 3.0]),
        "lr": np.array([0.5]),
        "empty": [],
    }
    out = reduce_metrics(metrics)
    assert out is metrics
    assert out["loss"] == 2.0 and out["accuracy"] == pytest.approx(0.8)
    assert (out["max_reward"], out["min_error"], out["grad"], out["lr"]) == (8.0, 0.05, 2.0, 0.5)
    assert math.isnan(out["empty"])


def test_metric_lists_aggregate_their_own_way():
    total = MetricList("sum", [1.0, 2.0])
    total.append(MetricValue(torch.tensor(3.0), AggregationType.SUM))
    assert reduce_metrics({"max_tokens": total})["max_tokens"] == 6.0  # the list's way, not the name's
    with pytest.raises(AggregationTypeMismatchError, match="sum != mean"):
        total.append(MetricValue(1.0, "mean"))
    assert MetricList.chain([MetricList("max", [1.0]), MetricList("max", [4.0, 2.0])]).aggregate() == 4.0
    with pytest.raises(ValueError, match="Unsupported aggregation type: 'median'"):
        MetricList("median")
    assert MetricValue.from_dict({"a": 1, "b": 2.5}, "min")["b"].value == 2.5


def test_the_trainer_reduces_worker_metrics_the_same_way():
    from verl.trainer.ppo.metric_utils import reduce_metrics as trainer_reduce

    assert trainer_reduce is reduce_metrics
