"""Cheap tensor transfers through Ray's object store.

torch's own pickling of a tensor pickles its whole storage (so a row slice of a 100 MiB batch ships
100 MiB) and copies it through ``torch.save``. Here a CPU tensor travels as a flat uint8 numpy view of
exactly its bytes, which Ray's pickle-5 serializer writes out of band straight into shared memory.
The receiver makes one private copy so the tensor is writable and never aliases the (immutable)
object-store buffer.

Only the sending process needs the serializer registered (the deserializer travels by reference), so
the driver installs it when it builds a worker group and each Ray worker installs it at start.
"""

from __future__ import annotations

import io

import numpy as np
import ray
import torch


def _tensor_from_wire(
    flat: np.ndarray | bytes, dtype: torch.dtype, shape: tuple, device: str, requires_grad: bool
):
    if isinstance(flat, bytes):  # non-strided tensors went through torch.save
        t = torch.load(io.BytesIO(flat), weights_only=False)
    else:
        buf = torch.empty(flat.shape[0], dtype=torch.uint8)
        buf.numpy()[:] = flat  # private, writable copy of the shared-memory bytes
        t = buf.view(dtype).reshape(shape)
    if device != "cpu":
        t = t.to(device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _tensor_to_wire(t: torch.Tensor):
    device, requires_grad = str(t.device), t.requires_grad
    t = t.detach()
    if t.layout != torch.strided or t.is_quantized:
        buf = io.BytesIO()
        torch.save(t.cpu(), buf)
        return buf.getvalue(), t.dtype, tuple(t.shape), device, requires_grad
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    flat = t.reshape(-1).view(torch.uint8).numpy()
    return flat, t.dtype, tuple(t.shape), device, requires_grad


def _tensor_from_wire_tuple(wire: tuple):
    return _tensor_from_wire(*wire)


def install_tensor_transport() -> None:
    """Make this process send ``torch.Tensor`` through Ray without torch.save or whole-storage copies."""
    if not ray.is_initialized():
        return
    ray.util.register_serializer(
        torch.Tensor, serializer=_tensor_to_wire, deserializer=_tensor_from_wire_tuple
    )
