"""Mixed precision for the training engines: fp32 master weights, a lower-precision compute copy.

Config (upstream names, per role in ``fsdp_config``)::

    model_dtype                    dtype the checkpoint is loaded in (default: the model section's
                                   ``model_dtype``, itself default fp32)
    mixed_precision.param_dtype    compute dtype of forward and backward (default: model_dtype; ``auto``:
                                   bf16 where the device multiplies bf16 natively and model_dtype is
                                   fp32, else model_dtype; see :func:`native_bf16`)
    mixed_precision.reduce_dtype   dtype of the cross-rank gradient reduction (default fp32)
    mixed_precision.buffer_dtype   dtype of floating buffers such as rotary tables (default fp32)

A trained engine always keeps its parameters, gradients and optimizer state in fp32 (the master
weights), whatever ``model_dtype`` or ``param_dtype`` say: AdamW steps of ``lr * ~1`` are below bf16's
resolution for weights of ordinary size, so a bf16 optimizer would leave most weights unchanged. An
engine without an optimizer (the reference policy) stores its parameters in the compute dtype.

How the compute copy is made: FSDP2 through ``MixedPrecisionPolicy``, FSDP1 through ``MixedPrecision``
(both cast the gathered parameters to ``param_dtype`` and reduce gradients in ``reduce_dtype``). The
one-CPU-rank ``fsdp2`` engine trains the plain module, so :class:`ComputeCast` does what FSDP2 does
there: each module that owns parameters runs its forward on ``param.to(param_dtype)`` (an autograd
cast, so gradients reach the fp32 masters cast back to fp32, as FSDP2's reduction does on one rank).
For generation, :func:`compute_params` swaps in one detached compute copy for the whole call instead
of a cast per decode step.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from verl.utils.torch_dtypes import to_dtype


def resolve_dtype(name: Any, key: str = "model_dtype") -> torch.dtype:
    """A dtype name (``fp32``, ``bf16``, ``bfloat16``, ...) -> torch dtype; ``key`` names it in errors."""
    return to_dtype(name, key)


def native_bf16(device: torch.device | str) -> bool:
    """The device multiplies bf16 matrices natively, faster than fp32: a CUDA GPU with bf16 tensor cores
    (compute capability >= 8.0), or a CPU whose feature flags list AMX-BF16, AVX512-BF16 or Arm's BF16
    (:mod:`verl.utils.cpu_features`). A capability of the hardware, never a measurement."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "cpu":
        from verl.utils.cpu_features import cpu_info

        return cpu_info().native_bf16
    return False


def resolve_param_dtype(name: Any, model_dtype: torch.dtype, device: torch.device | str) -> torch.dtype:
    """``mixed_precision.param_dtype``: a dtype name, or ``auto``: bf16 when the weights are fp32 and the
    device has native bf16 units (:func:`native_bf16`), else ``model_dtype``."""
    if str(name) != "auto":
        return resolve_dtype(name, "fsdp_config.mixed_precision.param_dtype")
    if model_dtype == torch.float32 and native_bf16(device):
        return torch.bfloat16
    return model_dtype


@dataclass(frozen=True)
class Precision:
    """The dtypes one engine uses (see the module doc)."""

    model_dtype: torch.dtype
    param_dtype: torch.dtype
    reduce_dtype: torch.dtype
    buffer_dtype: torch.dtype
    trainable: bool

    @property
    def storage_dtype(self) -> torch.dtype:
        """What the parameters are kept in: fp32 masters when trained, else the compute dtype."""
        return torch.float32 if self.trainable else self.param_dtype

    @property
    def casts_for_compute(self) -> bool:
        """True when the forward runs in a lower precision than the stored parameters."""
        return self.param_dtype != self.storage_dtype


def precision_from_config(engine_config: Any, trainable: bool, device: torch.device | str = "cpu") -> Precision:
    """The :class:`Precision` of ``fsdp_config`` (``model_dtype``, ``mixed_precision.*``) on ``device``
    (which ``param_dtype=auto`` asks for its bf16 units)."""
    mp = engine_config.mixed_precision
    model_dtype = resolve_dtype(engine_config.model_dtype, "fsdp_config.model_dtype")
    p = Precision(
        model_dtype=model_dtype,
        param_dtype=resolve_param_dtype(mp.param_dtype, model_dtype, device),
        reduce_dtype=resolve_dtype(mp.reduce_dtype, "fsdp_config.mixed_precision.reduce_dtype"),
        buffer_dtype=resolve_dtype(mp.buffer_dtype, "fsdp_config.mixed_precision.buffer_dtype"),
        trainable=trainable,
    )
    if trainable and p.param_dtype == torch.float16:
        raise ValueError(
            "fsdp_config.mixed_precision.param_dtype=fp16 needs loss scaling to train, which these engines do "
            "not do; use bf16 (same memory, fp32's exponent range)"
        )
    return p


def cast_model(model: nn.Module, precision: Precision) -> nn.Module:
    """Parameters to the storage dtype, floating buffers to ``buffer_dtype`` (in place)."""
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != precision.storage_dtype:
            p.data = p.data.to(precision.storage_dtype)
    for b in model.buffers():
        if b.is_floating_point() and b.dtype != precision.buffer_dtype:
            b.data = b.data.to(precision.buffer_dtype)
    return model


class ComputeCast:
    """Run every forward of ``module`` on ``dtype`` copies of its (fp32 master) parameters.

    Hooks sit on each submodule that owns parameters, not only on the root, so the recomputation of
    gradient checkpointing casts again exactly as the first forward did. Tied parameters (one
    ``Parameter`` in two modules) get one gradient, summed over both uses.

    ``units``: modules whose whole subtree is cast by one pair of hooks on the unit itself (the
    compiled decoder layers, :mod:`verl.workers.engine.compile`: their compiled ``forward`` then sees
    plain compute-dtype tensors and runs no hook of ours inside, so one compiled graph serves every
    layer). Parameter owners outside every unit keep their own hooks.
    """

    def __init__(self, module: nn.Module, dtype: torch.dtype, units: Iterable[nn.Module] = ()):
        self.dtype = dtype
        units = list(units)
        inside = {id(m) for u in units for m in u.modules()}
        owners = [
            m for m in module.modules()
            if id(m) not in inside and any(p is not None for p in m._parameters.values())
        ]
        #: hooked module -> the parameter owners its hooks cast
        self._groups: dict[nn.Module, list[nn.Module]] = {m: [m] for m in owners}
        for u in units:
            self._groups[u] = [m for m in u.modules() if any(p is not None for p in m._parameters.values())]
        self._owners = [m for group in self._groups.values() for m in group]
        self._masters: dict[nn.Module, list[tuple[nn.Module, dict[str, nn.Parameter]]]] = {}
        self._held = False
        for m in self._groups:
            m.register_forward_pre_hook(self._cast)
            m.register_forward_hook(self._restore, always_call=True)
        _CASTS[module] = self

    def _cast(self, module: nn.Module, args: Any) -> Any:
        if self._held:
            return None
        saved = []
        copies: dict[int, torch.Tensor] = {}  # per master: a parameter tied within the unit is cast once
        for owner in self._groups[module]:
            masters = {n: p for n, p in owner._parameters.items() if p is not None}
            saved.append((owner, masters))
            for name, p in masters.items():
                # the torch-blessed way to put a non-leaf tensor in a parameter slot (torch.func does it too)
                owner._parameters[name] = copies.setdefault(id(p), p.to(self.dtype))
        self._masters[module] = saved
        # Its floating inputs too: a parent that casts them to a child's weight dtype outside the child's
        # forward (Qwen2-VL's patch embedding reads proj.weight.dtype) saw the fp32 master; under FSDP2 every
        # weight is in the compute dtype there
        return tuple(a.to(self.dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)

    def _restore(self, module: nn.Module, args: Any, output: Any) -> None:
        for owner, masters in self._masters.pop(module, ()):
            owner._parameters.update(masters)

    @contextmanager
    def held(self) -> Iterator[None]:
        """One detached compute copy in every parameter slot for the whole block (generation)."""
        if self._held:
            yield
            return
        copies: dict[int, torch.Tensor] = {}  # per master: tied parameters stay one tensor
        saved = []
        with torch.no_grad():
            for m in self._owners:
                masters = {n: p for n, p in m._parameters.items() if p is not None}
                saved.append((m, masters))
                for name, p in masters.items():
                    m._parameters[name] = copies.setdefault(id(p), p.detach().to(self.dtype))
        self._held = True
        try:
            yield
        finally:
            self._held = False
            for m, masters in saved:
                m._parameters.update(masters)


_CASTS: weakref.WeakKeyDictionary[nn.Module, ComputeCast] = weakref.WeakKeyDictionary()


@contextmanager
def compute_params(module: nn.Module) -> Iterator[None]:
    """Inside the block ``module``'s parameters are its compute copy when a :class:`ComputeCast` runs it
    (the one-rank mixed-precision engine); any other module passes through untouched."""
    cast = _CASTS.get(module)
    if cast is None:
        yield
        return
    with cast.held():
        yield


__all__ = ["ComputeCast", "Precision", "cast_model", "compute_params", "native_bf16", "precision_from_config",
           "resolve_dtype", "resolve_param_dtype"]
