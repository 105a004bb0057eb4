"""The training-engine seam: one model, trained data-parallel over the default process group.

An engine owns the wrapped module, its optimizer and LR scheduler; it knows nothing of PPO. The
actor and critic (``verl.workers.actor``, ``verl.workers.critic``) hold the algorithm and talk to an
engine through this interface, so a new parallelism (Megatron later) is one new engine class.

Engines register in ``verl.registries.TRAINING_ENGINES`` under the strategy name users put in
``actor_rollout_ref.actor.strategy`` / ``critic.strategy`` and are built with :func:`build_engine`::

    engine = build_engine(
        "fsdp2",
        model_config=cfg.actor_rollout_ref.model,      # path, model_dtype, enable_gradient_checkpointing, ...
        engine_config=cfg.actor_rollout_ref.actor.fsdp_config,
        optim_config=cfg.actor_rollout_ref.actor.optim,  # None: inference only (reference policy)
        model_type="causal_lm",                          # or "value" (critic: backbone + scalar head)
        grad_clip=cfg.actor_rollout_ref.actor.grad_clip,
        total_training_steps=total_steps,                # for LR schedules; never read from config
    )

``torch.distributed`` must be initialised before an engine is built (gloo on CPU, NCCL on GPU). For the
FSDP engines every rank of the default group holds one data-parallel shard; engines with model
parallelism (``megatron``) name their data-parallel group in :attr:`BaseEngine.dp_group`, and run a
mini-batch's micro-batches through a pipeline schedule in one :meth:`BaseEngine.forward_backward` call.

Micro-batches are mappings of tensors with the batch keys of docs/contracts.md: ``input_ids``,
``attention_mask``, ``position_ids`` ([B, P+R]) and ``responses`` ([B, R]); outputs are per response
token ([B, R]). On-policy distillation (the ``fsdp2`` / ``fsdp`` engines): a micro-batch that also holds
``teacher_ids`` [B, R, k] gets ``topk_log_probs`` [B, R, k], the log-probs at those ids (with gradient in
``forward_backward``), and ``infer(..., topk=k)`` returns a teacher's ``topk_log_probs`` and ``topk_ids``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch
from verl.registries import TRAINING_ENGINES

ModelType = Literal["causal_lm", "value"]
Batch = Mapping[str, torch.Tensor]
#: loss_fn(outputs, micro_batch) -> (loss, metrics). ``loss`` is this rank's share of the global
#: loss: summed over every micro-batch on every rank it must equal the mini-batch loss (use
#: ``agg_loss(..., global_batch_info=...)``). The engine undoes the data-parallel gradient averaging.
LossFn = Callable[[dict[str, torch.Tensor], Batch], tuple[torch.Tensor, dict[str, Any]]]


class BaseEngine(ABC):
    """A model trained data-parallel. See the module doc for how it is built and fed."""

    #: the (wrapped) module; rollout engines that share weights read it in-process
    module: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    lr_scheduler: torch.optim.lr_scheduler.LRScheduler | None
    model_type: ModelType
    device: torch.device
    #: True when forwards pack real tokens (``model.use_remove_padding``): micro-batches are then
    #: best formed by real-token budgets (``verl.utils.micro_batching.token_budget_groups``)
    remove_padding: bool = False
    #: the decoder layers run through ``torch.compile`` (``actor.use_torch_compile``; FSDP engines), and
    #: a rollout on this engine's module compiles its decode step too
    compiled: bool = False

    @property
    @abstractmethod
    def dp_rank(self) -> int:
        """This process's rank in the data-parallel group."""

    @property
    @abstractmethod
    def dp_size(self) -> int:
        """Number of data-parallel ranks (the sum of per-rank losses is what gradients follow)."""

    @property
    def dp_group(self):
        """The data-parallel process group, over which batch counts and metrics are summed (None: the
        default group, i.e. every rank is its own data-parallel shard, as with FSDP). Engines with
        model parallelism (Megatron: TP/PP ranks hold the same data) return their DP group."""
        return None

    @abstractmethod
    def forward_micro_batch(
        self, micro_batch: Batch, *, temperature: float = 1.0, calculate_entropy: bool = False,
        entropy_grad: bool = True,
    ) -> dict[str, torch.Tensor]:
        """Forward one micro-batch (grad enabled iff the caller enables it).

        ``causal_lm``: ``{"log_probs": [B, R]}`` (log-prob of each response token under
        ``logits / temperature``) plus ``"entropys": [B, R]`` when ``calculate_entropy`` (without
        autograd when ``entropy_grad=False``: cheaper when the entropy is only a metric).
        ``value``: ``{"values": [B, R]}`` (the value of the state before each response token).
        """

    @abstractmethod
    def infer(
        self, micro_batches: Sequence[Batch], *, temperature: float = 1.0, calculate_entropy: bool = False
    ) -> dict[str, torch.Tensor]:
        """Eval-mode, no-grad forward of every micro-batch; outputs concatenated along rows (on CPU)."""

    @abstractmethod
    def forward_backward(
        self,
        micro_batches: Sequence[Batch],
        loss_fn: LossFn,
        *,
        temperature: float = 1.0,
        calculate_entropy: bool = False,
        entropy_grad: bool = True,
    ) -> list[dict[str, Any]]:
        """Train-mode forward and backward of every micro-batch, accumulating gradients.

        Returns the metrics dict of each micro-batch (with ``"loss"`` added). Does not step.
        """

    @abstractmethod
    def optimizer_step(self) -> float:
        """Clip gradients to ``grad_clip``, step (skipped when the norm is not finite), zero grads.

        Returns the gradient norm before clipping.
        """

    @abstractmethod
    def lr_scheduler_step(self) -> float:
        """Advance the LR schedule one training step; returns the new learning rate."""

    @abstractmethod
    def get_lr(self) -> float:
        """The learning rate the next optimizer step uses."""

    @abstractmethod
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Unsharded parameters (CPU tensors) on every rank (collective call): the module's own names
        (HF names, or peft's ``base_model.model.*`` with LoRA)."""

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under the HF model's names, as a rollout or an HF export loads them (collective);
        engines with adapters merge them in (:mod:`verl.workers.engine.lora`)."""
        return self.full_state_dict()

    def load_full_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Overwrite the parameters with a full state dict as :meth:`full_state_dict` returns it, given on
        every rank (collective call). Optimizer state is untouched. A reference policy uses it to take
        the actor's current weights (``ActorRolloutRefWorker.refresh_ref_from_actor``)."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot load a full state dict (needed to refresh a reference policy "
            "from the actor); use the fsdp2 or fsdp strategy"
        )

    @abstractmethod
    def save_checkpoint(self, path: str, global_step: int = 0) -> None:
        """Save model, optimizer, LR scheduler and RNG state to ``path`` (collective call)."""

    @abstractmethod
    def load_checkpoint(self, path: str) -> None:
        """Load what :meth:`save_checkpoint` wrote (collective call)."""


def register_engine(name: str) -> Callable[[type[BaseEngine]], type[BaseEngine]]:
    """Decorator: register an engine class under strategy ``name`` in ``TRAINING_ENGINES``."""
    return TRAINING_ENGINES.register(name)


def build_engine(strategy: str, **kwargs: Any) -> BaseEngine:
    """Construct the engine registered as ``strategy`` (``fsdp2``, ``fsdp``) with ``kwargs``.

    Keywords (all engines): ``model_config``, ``engine_config``, ``optim_config=None``,
    ``model_type="causal_lm"``, ``grad_clip=1.0``, ``total_training_steps=None``,
    ``checkpoint_config=None``.
    """
    return TRAINING_ENGINES.get(strategy)(**kwargs)
