"""``actor.use_torch_compile``: the decoder layers (forward + backward) and the native decode step
through ``torch.compile`` (inductor: fused elementwise loops around the matmuls, vectorised with the
instructions the processor has; on CUDA, Triton kernels).

What is compiled is one decoder layer, not the whole model: every layer of a model has the same code
and shapes, so one graph serves them all (compile time does not grow with depth), and the embedding,
the LM head and the loss stay eager. Shapes change from step to step (response lengths, micro-batch
rows), so the layer's token and row dims are marked dynamic before each call: one compilation per
variant (with and without autograd, with and without an attention mask), not one per length.

``use_torch_compile`` is ``null`` (the default), ``true`` (compiled, or an error naming why it cannot
be) or ``false`` (eager). ``null`` is decided by the work and the hardware, never by how busy the machine
is (:func:`resolve_compile`):

- the work: compiling costs a fixed time per run and saves a share of every step; it is on when the
  run's trained tokens x parameters reach :data:`MIN_PARAM_TOKENS` for the device type, where the
  saving has repaid the compile (the compile times, savings and the break-even are measured in
  ``benchmarks/grpo_step/README.md``, "Round three");
- the hardware: inductor must be able to build kernels for the device: a C++ compiler and a vectorised
  CPU capability on CPU, Triton on CUDA.

Supported: the ``fsdp2`` engine (a single CPU rank's plain module or ``fully_shard``-ed layers, whose
hooks run outside the compiled ``forward``), without Ulysses sequence parallelism (its all-to-all
runs inside the attention) and without LoRA.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

#: trained tokens x parameters from which ``use_torch_compile=null`` compiles (see the module doc)
MIN_PARAM_TOKENS = {"cpu": 1e13, "cuda": 1e16}
#: the ``torch.compile`` backend of everything compiled here (tests count graphs with a cheaper one)
BACKEND = "inductor"


def compiled(fn):
    """``fn`` through ``torch.compile`` with :data:`BACKEND`."""
    return torch.compile(fn, backend=BACKEND)


@functools.cache
def inductor_unavailable(device_type: str) -> str | None:
    """Why inductor cannot build kernels for ``device_type`` here (None when it can)."""
    if device_type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "Triton is not installed (inductor's CUDA kernels are Triton)"
    if device_type != "cpu":
        return f"torch.compile is not wired for device {device_type!r}"
    capability = torch.backends.cpu.get_cpu_capability()
    if capability == "DEFAULT":
        return "torch reports no vector instruction set on this CPU (capability DEFAULT)"
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception as e:  # noqa: BLE001 (any failure to find one means no C++ kernels)
        return f"inductor finds no C++ compiler for its CPU kernels ({type(e).__name__}: {e})"
    return None


def resolve_compile(
    setting: bool | None,
    *,
    device_type: str,
    strategy: str,
    sp_size: int = 1,
    lora: bool = False,
    param_tokens: float | None = None,
) -> tuple[bool, str]:
    """``(compile?, why)`` for ``actor.use_torch_compile`` = ``setting``. ``param_tokens``: the run's
    trained tokens x parameters (None: unknown, which ``null`` reads as too little). An explicit
    ``true`` that cannot be honoured is an error naming why. ``null`` weighs the work first, so a run
    too small to repay the compile never probes for a compiler."""
    if setting is False:
        return False, "use_torch_compile=false"
    if setting is None:
        need = MIN_PARAM_TOKENS.get(device_type)
        if need is None or param_tokens is None or param_tokens < need:
            have = "unknown" if param_tokens is None else f"{param_tokens:.2g}"
            bound = "no threshold for this device" if need is None else f"under {need:.0e}"
            return False, f"use_torch_compile=null: off, the run's parameter-tokens ({have}) are {bound}"
    blockers = []
    if strategy != "fsdp2":
        blockers.append(f"strategy {strategy!r} (compiled decoder layers are wired into fsdp2)")
    if sp_size > 1:
        blockers.append(f"ulysses_sequence_parallel_size={sp_size} (its all-to-all runs inside the attention)")
    if lora:
        blockers.append("LoRA (peft's adapter layers are not compiled here)")
    missing = inductor_unavailable(device_type)
    if missing is not None:
        blockers.append(missing)
    if setting is True:
        if blockers:
            raise ValueError(
                "actor_rollout_ref.actor.use_torch_compile=true cannot be honoured: " + "; ".join(blockers)
                + ". Set it to false (or null: compiled where it can be)"
            )
        return True, "use_torch_compile=true"
    if blockers:
        return False, "use_torch_compile=null: off, " + "; ".join(blockers)
    return True, (f"use_torch_compile=null: on, the run's parameter-tokens ({param_tokens:.2g}) reach "
                  f"{MIN_PARAM_TOKENS[device_type]:.0e}")


def _mark_dynamic(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
    """Rows and tokens of a decoder layer's inputs are dynamic: one graph for every length and batch.
    Hidden states and rotary tables keep their feature dim static; masks and position ids are dynamic
    throughout (a size-1 dim stays specialised, which ``maybe_mark_dynamic`` allows)."""
    hidden = args[0] if args else kwargs.get("hidden_states")
    tensors = [(hidden, 1)] + [(t, 1) for t in kwargs.get("position_embeddings") or ()]
    tensors += [(kwargs.get(k), 0) for k in ("position_ids", "attention_mask")]
    for t, static_tail in tensors:
        if isinstance(t, torch.Tensor):
            for dim in range(t.dim() - static_tail):
                torch._dynamo.maybe_mark_dynamic(t, dim)


def compile_layers(model: nn.Module, layer_classes: tuple[type, ...]) -> list[nn.Module]:
    """Compile the ``forward`` of every decoder layer of ``model`` (in place) and return the layers.

    Only ``forward`` is compiled, not the module call: hooks on the layer (FSDP2's gathers, the
    mixed-precision cast of :class:`~verl.workers.engine.precision.ComputeCast`) run eagerly around it,
    so the graph sees plain tensors and is the same for every layer."""
    layers = [m for m in model.modules() if isinstance(m, layer_classes)]
    for layer in layers:
        layer.register_forward_pre_hook(_mark_dynamic, with_kwargs=True)
        layer.forward = compiled(layer.forward)
    return layers


__all__ = ["BACKEND", "MIN_PARAM_TOKENS", "compile_layers", "compiled", "inductor_unavailable", "resolve_compile"]
