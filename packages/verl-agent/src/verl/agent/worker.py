"""The hybrid actor/rollout/ref worker with agent-loop generation.

`AgentActorRolloutRefWorker` is verl-workers' ``ActorRolloutRefWorker`` whose
``generate_sequences`` runs `AgentLoopManager` over an `HFAsyncServer` on the actor's live module
(same process, same weights: every actor update is seen by the next rollout), or with
``rollout.name=vllm`` (``mode=async``) over a `VLLMAsyncServer`, whose engine gets the actor's weights
through the weight sync before each rollout after an update. The trainer's
generate stage uses it unchanged: map ``Role.ActorRollout`` to this class.

Each rank runs its own rows' loops; ranks make different numbers of model calls, so the decode loop
agrees on "still running" only within the rank (a single-rank process group) and the FSDP2
parameters stay gathered for the whole rollout (``gathered_fsdp2_params``).
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from verl import DataProto
from verl.agent.manager import AgentLoopManager
from verl.agent.server import HFAsyncServer
from verl.agent.tokenization import ChatTokens
from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.fsdp_workers import ActorRolloutRefWorker


def end_of_turn_token_ids(tokenizer: Any) -> list[int]:
    """The special token that opens the template's end-of-turn text (Qwen: ``<|im_end|>``), if any."""
    chat = ChatTokens(tokenizer)
    ids = chat.encode(chat.end_of_turn)[:1]
    return [i for i in ids if i in set(tokenizer.all_special_ids)]


def _own_rank_group() -> Any:
    """A process group holding only this rank (every rank must create every group, in order)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    groups = [dist.new_group([r]) for r in range(dist.get_world_size())]
    return groups[dist.get_rank()]


class AgentActorRolloutRefWorker(ActorRolloutRefWorker):
    """``ActorRolloutRefWorker`` + agent loops (see module doc). ``loop_kwargs`` reach every loop."""

    def __init__(
        self,
        config: Any,
        role: str,
        total_training_steps: int | None = None,
        loop_kwargs: dict | None = None,
        **kw: Any,
    ):
        super().__init__(config, role, total_training_steps=total_training_steps, **kw)
        self.loop_kwargs = dict(loop_kwargs or {})
        self.llm_server: HFAsyncServer | None = None
        self.agent_manager: AgentLoopManager | None = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        super().init_model()
        if not self._is_rollout:
            return
        stops = sorted(set(self.rollout.eos_token_ids) | set(end_of_turn_token_ids(self.tokenizer)))
        if self.config.rollout.name == "vllm":
            from verl.agent.vllm_server import VLLMAsyncServer  # vLLM's async engine (own weights)

            self.llm_server = VLLMAsyncServer(self.rollout, stops)
        elif not self.rollout.shares_trainer_weights:
            raise NotImplementedError(
                f"agent loops run on the trainer's own module or on vLLM; rollout.name={self.config.rollout.name!r} "
                "keeps its own weights (use rollout.name=native, hf or vllm)"
            )
        else:
            self.llm_server = HFAsyncServer(
                self.actor_engine.module, stops, self.rollout.pad_token_id, sync_group=_own_rank_group()
            )
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.agent_manager = AgentLoopManager(
            self.config.rollout,
            self.llm_server,
            self.tokenizer,
            pad_token_id=self.rollout.pad_token_id,
            loop_kwargs=self.loop_kwargs,
            seed=int(self.config.rollout.seed) + rank,  # rollout.seed + rank, as every rollout worker
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Agent-loop rollouts of the rows (see `AgentLoopManager` for the output keys)."""
        if not self._is_rollout:
            raise RuntimeError(f"generate_sequences needs a rollout; this worker's role is {self.role!r}")
        from verl.workers.rollout.hf_rollout import gathered_fsdp2_params

        if not self.rollout.shares_trainer_weights:  # vllm: push the actor's latest weights, no gather
            self._sync_rollout_weights()
            self.rollout.resume()
            try:
                return self.agent_manager.generate_sequences(prompts)
            finally:
                self.rollout.release()
        self.rollout.resume()
        try:
            with gathered_fsdp2_params(self.actor_engine.module, self.rollout.reshard_after_forward):
                return self.agent_manager.generate_sequences(prompts)
        finally:
            self.rollout.release()
