"""Reducing per-worker / per-micro-batch metric lists to one number (upstream's ``verl.utils.metric.utils``).

`reduce_metrics` reduces each entry of a ``{name: [values]}`` dict in place and returns the dict: by the
entry's `MetricList` aggregation when it is one, else by the name: ``max`` when the name contains
"max", ``min`` when it contains "min", the mean otherwise. Values may be numbers, numpy arrays or
tensors; an empty list reduces to NaN. `MetricValue` / `MetricList` carry an explicit `AggregationType`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import numpy as np
import torch

__all__ = ["AggregationType", "AggregationTypeMismatchError", "MetricList", "MetricValue", "reduce_metrics"]

Numeric = int | float | torch.Tensor


class AggregationType(Enum):
    MEAN = "mean"
    SUM = "sum"
    MIN = "min"
    MAX = "max"


class AggregationTypeMismatchError(Exception):
    def __init__(self, agg1: AggregationType, agg2: AggregationType):
        super().__init__(f"Aggregation type mismatch: {agg1.value} != {agg2.value}")


_REDUCE = {
    AggregationType.MEAN: np.mean,
    AggregationType.SUM: np.sum,
    AggregationType.MIN: np.min,
    AggregationType.MAX: np.max,
}


def _aggregation(aggregation: str | AggregationType) -> AggregationType:
    try:
        return AggregationType(aggregation)
    except ValueError as e:
        known = ", ".join(a.value for a in AggregationType)
        raise ValueError(f"Unsupported aggregation type: {aggregation!r}; known: {known}") from e


def tensor_to_float(value: torch.Tensor) -> float:
    """A one-element tensor as a float."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"Expected torch.Tensor, got {type(value).__name__}")
    if value.numel() != 1:
        raise ValueError(f"Only scalar tensors can be converted to float, got shape {tuple(value.shape)}")
    return float(value.detach().item())


def _number(value: Any) -> float:
    if isinstance(value, torch.Tensor):
        return tensor_to_float(value)
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"Unsupported value type: {type(value).__name__}")


class MetricValue:
    """One value with how lists of it aggregate."""

    def __init__(self, value: Numeric, aggregation: str | AggregationType) -> None:
        self.value = _number(value)
        self.aggregation = _aggregation(aggregation)

    @classmethod
    def from_dict(
        cls, data: dict[str, Numeric], aggregation: str | AggregationType
    ) -> dict[str, MetricValue]:
        return {key: cls(value, aggregation) for key, value in data.items()}

    def init_list(self) -> MetricList:
        return MetricList(aggregation=self.aggregation)


class MetricList:
    """Values of one metric that aggregate one way (a `MetricValue` of another way is refused)."""

    def __init__(self, aggregation: str | AggregationType, values: list[float] | None = None) -> None:
        self.aggregation = _aggregation(aggregation)
        self.values: list[float] = [] if values is None else list(values)

    def append(self, value: float | MetricValue) -> None:
        if isinstance(value, MetricValue):
            if value.aggregation != self.aggregation:
                raise AggregationTypeMismatchError(self.aggregation, value.aggregation)
            value = value.value
        self.values.append(_number(value))

    def extend(self, values: MetricList | list[float | MetricValue]) -> None:
        if isinstance(values, MetricList):
            if values.aggregation != self.aggregation:
                raise AggregationTypeMismatchError(self.aggregation, values.aggregation)
            values = values.values
        for value in values:
            self.append(value)

    def aggregate(self) -> float:
        return float(_REDUCE[self.aggregation](self.values)) if self.values else float("nan")

    @classmethod
    def chain(cls, metric_lists: list[MetricList]) -> MetricList:
        if not metric_lists:
            return cls(aggregation=AggregationType.MEAN)
        chained = cls(aggregation=metric_lists[0].aggregation)
        for ml in metric_lists:
            chained.extend(ml)
        return chained


def _values(val: Any) -> np.ndarray:
    if isinstance(val, torch.Tensor):
        return val.detach().float().cpu().numpy().reshape(-1)
    if isinstance(val, (list, tuple)):
        return np.asarray([_number(v) if isinstance(v, torch.Tensor) else v for v in val], dtype=np.float64)
    return np.asarray(val, dtype=np.float64).reshape(-1)


def reduce_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """Reduce each list in ``metrics`` (in place; the dict is returned), see the module doc."""
    if not isinstance(metrics, dict):  # a read-only mapping: reduce a copy
        metrics = dict(metrics)
    for key, val in metrics.items():
        if isinstance(val, MetricList):
            metrics[key] = val.aggregate()
            continue
        values = _values(val)
        if values.size == 0:
            metrics[key] = float("nan")
        elif "max" in key:
            metrics[key] = float(np.max(values))
        elif "min" in key:
            metrics[key] = float(np.min(values))
        else:
            metrics[key] = float(np.mean(values))
    return metrics
