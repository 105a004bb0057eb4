"""Metric reduction (upstream's ``verl.utils.metric``): see `verl.utils.metric.utils`."""

from verl.utils.metric.utils import (
    AggregationType,
    AggregationTypeMismatchError,
    MetricList,
    MetricValue,
    reduce_metrics,
)

__all__ = ["AggregationType", "AggregationTypeMismatchError", "MetricList", "MetricValue", "reduce_metrics"]
