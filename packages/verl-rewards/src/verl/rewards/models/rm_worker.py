"""Discriminative reward model worker: a sequence classifier scores whole trajectories, on a training
engine (FSDP2 / FSDP) like every other role.

``RewardModelWorker(config=cfg.reward.reward_model)`` with ``init_model()`` (ONE_TO_ALL) and
``compute_rm_score(data) -> DataProto{rm_scores}`` (DP_COMPUTE_PROTO). ``rm_scores`` is ``[N, R]``
with each row's score on its last model token (the last ``response_mask`` 1), like a rule reward.
Runs on its own resource pool or colocated with other roles (the trainer maps ``Role.RewardModel``).

The model is built by the engine registered as ``strategy`` (verl-workers' ``fsdp2`` / ``fsdp``, via
``verl.registries.TRAINING_ENGINES``) as a one-label token classifier, which loads a
``*ForSequenceClassification`` checkpoint's backbone and ``score`` head (upstream's RM does the same);
the score of a sequence is the head's output at its last token. The engine brings the device (the
worker group's backend: gloo -> CPU, NCCL -> GPU), sharding over the group, mixed precision
(``fsdp_config.model_dtype`` / ``fsdp_config.mixed_precision.*``) and packed sequences
(``model.use_remove_padding``). Each sequence is fed with one extra token after it, whose prediction
position is its last real token, so the engine's per-response-token output is exactly the score.

Config keys (upstream names)::

    strategy                   fsdp2 | fsdp (a registered training engine)
    model.path                 the RM checkpoint (a 1-label sequence classifier)
    model.input_tokenizer      the policy's tokenizer path; when the RM's tokenizer or chat template
                               differs, each conversation is decoded with it and re-templated for the
                               RM (the ``raw_prompt`` chat column; else the decoded prompt text
                               becomes one user message)
    model.trust_remote_code
    model.external_lib         a module imported before loading (one that registers a custom model)
    model.use_remove_padding   pack real tokens (no padding) in each forward
    model.fsdp_config          the engine's fsdp_config (offload flags, sharding, dtypes)
    micro_batch_size_per_gpu   rows per forward (None: this rank's rows at once)
    use_dynamic_bsz            micro-batches by a token budget instead of a row count ...
    forward_max_token_len_per_gpu  ... of this many tokens per forward
    max_length                 RM input limit; longer inputs keep their end (None: no limit)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register

_STRATEGIES = ("fsdp2", "fsdp")


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    """``cfg.a.b`` for plain dicts and OmegaConf configs alike, ``default`` when missing or None."""
    from omegaconf import DictConfig, OmegaConf

    node = cfg
    for part in dotted.split("."):
        if node is None:
            return default
        if isinstance(node, DictConfig):
            node = OmegaConf.select(node, part, default=None)
        else:
            node = node.get(part)
    return default if node is None else node


def _fsdp_config(cfg: Any) -> Any:
    """``model.fsdp_config`` over the schema's defaults (so a partial dict config works too)."""
    import dataclasses

    from omegaconf import OmegaConf
    from verl.trainer.config import FSDPEngineConfig

    given = _get(cfg, "model.fsdp_config", {}) or {}
    return OmegaConf.merge(OmegaConf.create(dataclasses.asdict(FSDPEngineConfig())), given)


def _init_distributed(device: str | None) -> None:
    """Select this worker's device (under Ray: the GPU Ray gave the actor) and join the worker group's
    torch.distributed group (env:// from the Worker): NCCL on GPU, gloo on CPU."""
    from verl.utils.device import get_nccl_backend, set_worker_device

    dev = set_worker_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend=get_nccl_backend(dev.type))


class RewardModelWorker(Worker):
    def __init__(self, config: Any, device: str | None = None, **_: Any):
        super().__init__()
        self.config = config
        self.device_name = device  # trainer.device resolved by the driver (cpu | cuda)
        self.strategy = str(_get(config, "strategy", "fsdp2"))
        if self.strategy not in _STRATEGIES:
            raise NotImplementedError(
                f"reward.reward_model.strategy={self.strategy!r}: the reward model runs on {' or '.join(_STRATEGIES)}"
            )
        mbs = _get(config, "micro_batch_size_per_gpu")
        self.micro_batch_size = None if mbs is None else int(mbs)
        self.use_dynamic_bsz = bool(_get(config, "use_dynamic_bsz", False))
        self.max_token_len = _get(config, "forward_max_token_len_per_gpu")
        if self.use_dynamic_bsz and (self.max_token_len is None or int(self.max_token_len) <= 0):
            raise ValueError(
                "reward.reward_model.use_dynamic_bsz=true needs a positive forward_max_token_len_per_gpu, "
                f"got {self.max_token_len!r}"
            )
        max_length = _get(config, "max_length")
        self.max_length = None if max_length is None else int(max_length)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from omegaconf import OmegaConf
        from transformers import AutoTokenizer
        from verl.registries import TRAINING_ENGINES

        path = _get(self.config, "model.path")
        if not path:
            raise ValueError("reward.reward_model.model.path is not set (a sequence-classification checkpoint)")
        _init_distributed(self.device_name)
        external = _get(self.config, "model.external_lib")
        if external:
            import importlib

            importlib.import_module(str(external))
        trust = bool(_get(self.config, "model.trust_remote_code", False))
        fsdp_config = _fsdp_config(self.config)
        model_config = OmegaConf.create(
            {
                "path": str(path),
                "trust_remote_code": trust,
                "override_config": {},
                "model_dtype": str(_get(fsdp_config, "model_dtype", "float32")),
                "enable_gradient_checkpointing": False,  # inference only
                "use_remove_padding": bool(_get(self.config, "model.use_remove_padding", False)),
            }
        )
        self.engine = TRAINING_ENGINES.get(self.strategy)(
            model_config=model_config, engine_config=fsdp_config, optim_config=None, model_type="value"
        )
        self.rm_tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
        pad = self.engine.hf_config.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self.rm_tokenizer.pad_token_id or 0)
        input_tok = _get(self.config, "model.input_tokenizer")
        self.input_tokenizer = None
        if input_tok and input_tok != path:
            policy_tok = AutoTokenizer.from_pretrained(input_tok, trust_remote_code=trust)
            if policy_tok.get_vocab() != self.rm_tokenizer.get_vocab() or (
                policy_tok.chat_template != self.rm_tokenizer.chat_template
            ):
                self.input_tokenizer = policy_tok

    # -- building RM inputs -------------------------------------------------------------------
    def _same_tokenizer_inputs(self, data: DataProto) -> list[list[int]]:
        ids, mask = data.batch["input_ids"], data.batch["attention_mask"]
        return [ids[i][mask[i].bool()].tolist() for i in range(len(data))]

    def _retemplated_inputs(self, data: DataProto, resp_lengths: torch.Tensor) -> list[list[int]]:
        tok_in = self.input_tokenizer
        responses = data.batch["responses"]
        prompts = data.batch["prompts"]
        p_mask = data.batch["attention_mask"][:, : prompts.shape[-1]]
        raw = data.non_tensor_batch.get("raw_prompt")
        out = []
        for i in range(len(data)):
            response = tok_in.decode(responses[i, : int(resp_lengths[i])], skip_special_tokens=True)
            if raw is not None:
                chat = [dict(m) for m in raw[i]]
            else:
                text = tok_in.decode(prompts[i][p_mask[i].bool()], skip_special_tokens=True)
                chat = [{"role": "user", "content": text}]
            chat.append({"role": "assistant", "content": response})
            text = self.rm_tokenizer.apply_chat_template(chat, tokenize=False)
            out.append(self.rm_tokenizer(text, add_special_tokens=False)["input_ids"])
        return out

    # -- scoring ------------------------------------------------------------------------------
    def _micro_batches(self, seqs: list[list[int]]) -> list[list[int]]:
        """Row groups; every rank gets the same number (each forward of a sharded model is a collective)."""
        from verl.utils.micro_batching import rows_per_micro_batch, token_budget_groups

        n = len(seqs)
        if self.use_dynamic_bsz and self.engine.remove_padding:
            return token_budget_groups([len(s) + 1 for s in seqs], int(self.max_token_len))
        if self.use_dynamic_bsz:
            rows = rows_per_micro_batch(
                self._width(seqs),
                micro_batch_size=None,
                use_dynamic_bsz=True,
                max_token_len=int(self.max_token_len),
            )
        else:
            rows = self.micro_batch_size or n
        return [list(range(s, min(s + rows, n))) for s in range(0, n, rows)]

    def _width(self, seqs: list[list[int]]) -> int:
        """Padded width (with the extra token), the same on every rank."""
        width = torch.tensor([max(len(s) for s in seqs) + 1], dtype=torch.int64, device=self.engine.device)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(width, op=dist.ReduceOp.MAX)
        return int(width.item())

    def _scores(self, seqs: list[list[int]]) -> torch.Tensor:
        width = self._width(seqs)
        groups = self._micro_batches(seqs)
        batches = []
        for rows in groups:
            ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for j, r in enumerate(rows):
                # Left padding; the extra (pad) token after each sequence is the one "response" token,
                # so the engine's output for it comes from the sequence's last real token.
                s = seqs[r] + [self.pad_token_id]
                ids[j, width - len(s) :] = torch.tensor(s, dtype=torch.long)
                mask[j, width - len(s) :] = 1
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            batches.append(
                {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "responses": ids[:, -1:]}
            )
        values = self.engine.infer(batches)["values"][:, 0].float().cpu()
        order = torch.tensor([r for rows in groups for r in rows])
        scores = torch.empty(len(seqs))
        scores[order] = values
        return scores

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        from verl.rewards.managers.agent_rewards import last_assistant_positions
        from verl.rewards.managers.base import response_lengths

        lengths = response_lengths(data)
        if self.input_tokenizer is None:
            seqs = self._same_tokenizer_inputs(data)
        else:
            seqs = self._retemplated_inputs(data, lengths)
        if self.max_length is not None:
            seqs = [s[-self.max_length :] for s in seqs]
        scores = self._scores(seqs)
        rm = torch.zeros(data.batch["responses"].shape, dtype=torch.float32)
        rm[torch.arange(len(data)), last_assistant_positions(data).cpu()] = scores
        return DataProto.from_dict(tensors={"rm_scores": rm})
