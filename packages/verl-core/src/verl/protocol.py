"""DataProto and its helpers under upstream verl's module name: ``from verl.protocol import ...``.

The class lives in `verl.data_proto`, the row and config helpers in `verl.protocol_support`, and
DataProtoFuture with the module-level helpers (padding, batch-dim folding, collate) in
`verl.protocol_future`, which builds on the class; this module gathers them and is what code imports.
"""

from verl.data_proto import DataProto, unfold_column_chunks
from verl.protocol_future import (
    DataProtoFuture,
    collate_fn,
    fold_batch_dim,
    pad_dataproto_to_divisor,
    unfold_batch_dim,
    unpad_dataproto,
)
from verl.protocol_support import (  # _padding_size_key: re-exported, as upstream's verl.protocol has it
    DataProtoConfig,
    DataProtoItem,
    _padding_size_key,  # noqa: F401
)
from verl.utils.batch_merge import (
    DataProtoCheckError,
    DataProtoTypeError,
    list_of_dict_to_dict_of_list,
    union_numpy_dict,
    union_tensor_dict,
    union_two_dict,
)
from verl.utils.tensor_batch import TensorBatch

__all__ = [
    "DataProto",
    "DataProtoCheckError",
    "DataProtoTypeError",
    "DataProtoItem",
    "DataProtoFuture",
    "DataProtoConfig",
    "TensorBatch",
    "pad_dataproto_to_divisor",
    "unpad_dataproto",
    "union_tensor_dict",
    "union_numpy_dict",
    "union_two_dict",
    "fold_batch_dim",
    "unfold_batch_dim",
    "unfold_column_chunks",
    "collate_fn",
    "list_of_dict_to_dict_of_list",
]
