"""CPU support for Megatron-Core (0.16.1): the only place that knows Megatron was written for CUDA.

Megatron-Core runs its tensor, pipeline and data parallelism over ``torch.distributed`` and so works
over gloo on CPU, except where it names CUDA directly in spots no flag reaches:

- ``torch.cuda.current_device()`` as a ``device=`` argument: RoPE's frequencies, the tensor-parallel
  gather/scatter and all-gather buffers (``tensor_parallel.mappings`` / ``layers`` / ``utils``), the
  DDP grad buffer (``distributed.param_and_grad_buffer``), the pipeline send/receive buffers and
  their shape exchange (``pipeline_parallel.p2p_communication``), the distributed optimizer's buffers;
- ``device="cuda"`` literals: the token counters of the schedules, the optimizer's ``found_inf`` /
  scale tensors, grad clipping's norm buffers, the grad buffer's warm-up tensor;
- ``torch.cuda.synchronize()`` / ``torch.cuda.Stream`` / ``torch.cuda.current_stream()`` (p2p,
  DDP's communication stream, ``finalize_model_grads``) and ``tensor.cuda()`` (optimizer state load);
- ``param.type() == 'torch.cuda.FloatTensor'`` type-string checks in the (distributed) optimizer,
  which decide whether a parameter gets an fp32 main copy;
- the CUDA generator state that activation recompute saves and restores around each layer.

:func:`cpu_support` covers all of them for the duration of a ``with`` block: ``torch.cuda`` gets a
``current_device`` that answers ``"cpu"``, no-op ``synchronize`` / streams, and a
``TorchFunctionMode`` maps every ``device="cuda"`` argument to ``cpu``, makes ``tensor.cuda()`` the
identity and makes a CPU tensor's ``.type()`` read as its CUDA name. The engine enters it only when
its device is CPU (never on the GPU path) and only around its own Megatron calls, so the rest of the
process (the rollout's HF model, other engines) never runs under it. Megatron's RNG tracker is built
with ``inference_rng_tracker=True`` on CPU (see :func:`seed_rng`): the training tracker keeps CUDA
generator states; dropout is off in the models we build, so no stream of random numbers is lost.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

_CUDA_TYPE_NAMES = {
    torch.float32: "torch.cuda.FloatTensor",
    torch.float16: "torch.cuda.HalfTensor",
    torch.bfloat16: "torch.cuda.BFloat16Tensor",
    torch.float64: "torch.cuda.DoubleTensor",
    torch.int64: "torch.cuda.LongTensor",
    torch.int32: "torch.cuda.IntTensor",
    torch.uint8: "torch.cuda.ByteTensor",
    torch.bool: "torch.cuda.BoolTensor",
}


def _to_cpu_device(value):
    if isinstance(value, str) and value.startswith("cuda"):
        return "cpu"
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("cpu")
    if isinstance(value, int) and not isinstance(value, bool):
        return "cpu"  # a CUDA ordinal, as torch.cuda.current_device() would return
    return value


class _CudaOnCpu(TorchFunctionMode):
    """``device="cuda"`` -> cpu, ``t.cuda()`` -> ``t``, ``t.type()`` -> the CUDA type name."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            t = args[0]
            if t.device.type == "cpu" and t.dtype in _CUDA_TYPE_NAMES:
                return _CUDA_TYPE_NAMES[t.dtype]
        if "device" in kwargs:
            kwargs = {**kwargs, "device": _to_cpu_device(kwargs["device"])}
        if func is torch.Tensor.to and args and len(args) > 1:
            args = (args[0], _to_cpu_device(args[1]), *args[2:])
        return func(*args, **kwargs)


class _NoStream:
    """Stands in for a CUDA stream: work on CPU is already ordered."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, other) -> None:
        return None

    def wait_event(self, event) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def record_event(self, event=None):
        return event

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def _no_stream_context(stream=None):
    return contextlib.nullcontext()


_CUDA_PATCHES = {
    "current_device": lambda: "cpu",
    "synchronize": lambda device=None: None,
    "current_stream": lambda device=None: _NoStream(),
    "default_stream": lambda device=None: _NoStream(),
    "Stream": _NoStream,
    "stream": _no_stream_context,
    "empty_cache": lambda: None,
}


def _patches() -> list[tuple[object, str, object]]:
    """``(object, attribute, replacement)`` for the block. Activation recompute saves and restores the
    CUDA generator around each recomputed layer: on CPU there is none (the CPU generator is saved
    separately by Megatron), so its state reads as the CPU one and restoring it does nothing."""
    from megatron.core.tensor_parallel import random as mcore_random

    patches: list[tuple[object, str, object]] = [(torch.cuda, k, v) for k, v in _CUDA_PATCHES.items()]
    patches.append((torch.cuda.random, "get_rng_state", lambda device="cuda": torch.get_rng_state()))
    patches.append((mcore_random, "_lazy_call", lambda callback: None))
    return patches


_lock = threading.RLock()
_depth = 0
_saved: list[tuple[object, str, object]] = []


@contextlib.contextmanager
def cpu_support() -> Iterator[None]:
    """Run Megatron-Core's CUDA-only spots on CPU inside the block (re-entrant; see module doc)."""
    global _depth
    with _lock:
        if _depth == 0:
            for obj, name, value in _patches():
                _saved.append((obj, name, getattr(obj, name)))
                setattr(obj, name, value)
        _depth += 1
    try:
        with _CudaOnCpu():
            yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for obj, name, value in reversed(_saved):
                    setattr(obj, name, value)
                _saved.clear()


def device_support(device: torch.device) -> contextlib.AbstractContextManager:
    """:func:`cpu_support` on CPU, nothing on any other device (the GPU path runs Megatron as is)."""
    return cpu_support() if device.type == "cpu" else contextlib.nullcontext()


def seed_rng(seed: int, device: torch.device) -> None:
    """Megatron's model-parallel RNG tracker (``model_parallel_cuda_manual_seed``); on CPU the
    inference tracker, which keeps no CUDA generator state."""
    from megatron.core import tensor_parallel

    torch.manual_seed(seed)
    if device.type == "cpu":
        tensor_parallel.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True, force_reset_rng=True)
    else:
        tensor_parallel.model_parallel_cuda_manual_seed(seed, force_reset_rng=True)
