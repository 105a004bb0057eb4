"""DataProto's consistency checks fail with errors that are also AssertionErrors: upstream runs the same
checks as asserts, and its callers catch AssertionError."""

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.protocol import DataProtoCheckError, DataProtoTypeError


def two_rows(**non_tensors):
    return DataProto.from_dict(tensors={"x": torch.zeros(2, 3)}, non_tensors=non_tensors or None)


@pytest.mark.parametrize(
    "make",
    [
        # tensors disagreeing on the batch size
        lambda: DataProto.from_dict(tensors={"a": torch.zeros(2, 1), "b": torch.zeros(3, 1)}),
        # a non-tensor column with another row count
        lambda: DataProto(batch=two_rows().batch, non_tensor_batch={"s": np.array(["a", "b", "c"], dtype=object)}),
        # union of different row counts
        lambda: two_rows().union(DataProto.from_dict(tensors={"y": torch.zeros(3)})),
        # union with a shared key holding different values
        lambda: two_rows().union(DataProto.from_dict(tensors={"x": torch.ones(2, 3)})),
        # union with conflicting meta_info
        lambda: DataProto.from_dict(tensors={"x": torch.zeros(2)}, meta_info={"t": 1}).union(
            DataProto.from_dict(tensors={"y": torch.zeros(2)}, meta_info={"t": 2})
        ),
        # chunks that do not divide the rows (no auto padding)
        lambda: DataProto.from_dict(tensors={"x": torch.zeros(3)}).chunk(2),
        # mini-batches that do not divide the rows
        lambda: list(DataProto.from_dict(tensors={"x": torch.zeros(3)}).make_iterator(2, epochs=1)),
    ],
)
def test_consistency_failures_are_assertion_errors(make):
    with pytest.raises(AssertionError) as e:
        make()
    assert isinstance(e.value, DataProtoCheckError | DataProtoTypeError)
    assert isinstance(e.value, ValueError | TypeError)  # and what this project raised before


def test_a_wrong_type_is_a_type_error_and_an_assertion_error():
    with pytest.raises(AssertionError) as e:
        DataProto(batch=two_rows().batch, non_tensor_batch={"s": ["a", "b"]})
    assert isinstance(e.value, TypeError)
