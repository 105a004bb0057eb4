"""The teacher role of on-policy distillation: a frozen model that scores the student's response tokens.

One worker group per teacher (``distillation.teacher_models.<name>``), on the teacher pool. The model runs
on an inference-only training engine (``fsdp2``/``fsdp``, weights sharded over the group's workers, as
the reference policy's), so a teacher serves exactly the log-probs a trained model would compute. Per
response token it returns (upstream's batch keys):

- ``teacher_logprobs`` [N, R, K]: its ``topk`` largest log-probs (top-k losses), or with ``topk=0``
  (K = 1) its log-prob of the token the student sampled (the estimator losses);
- ``teacher_ids`` [N, R, K]: the token ids of those log-probs.

With ``privileged_context.key`` the teacher's prompt also holds that field's text (on-policy
self-distillation, ``verl.trainer.distillation.privileged_context``). Built by the driver's
``verl.trainer.distillation.teacher_pool``, which passes every setting resolved.
"""

from __future__ import annotations

from typing import Any

import torch
from verl import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.workers.worker_setup import init_distributed

_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses")


class TeacherWorker(Worker):
    """``config``: the teacher's resolved entry (``key``, ``model_path``, ``inference``,
    ``privileged_context``); ``model``: the model section to load (``path`` = the teacher's);
    ``engine_config``: its ``fsdp_config``; ``strategy``: fsdp2 | fsdp; ``topk``: 0 for the sampled token's
    log-prob, else the number of top log-probs per token."""

    def __init__(
        self, config: Any, model: Any, engine_config: Any, strategy: str, topk: int, device: str | None = None,
        seed: int | None = None, **_: Any,
    ):
        super().__init__()
        self.config = config
        self.model_config = model
        self.engine_config = engine_config
        self.strategy = strategy
        self.topk = int(topk)
        self.device_name, self.seed = device, seed
        self.engine = None
        self.tokenizer = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Join torch.distributed and load the teacher (no optimizer); its tokenizer when it reads a
        privileged context."""
        init_distributed(self.device_name, self.seed)
        from verl.workers.engine import build_engine

        self.engine = build_engine(
            self.strategy, model_config=self.model_config, engine_config=self.engine_config, optim_config=None,
            model_type="causal_lm",
        )
        if self.config.privileged_context.key is not None:
            from verl.workers.tokenizer import hf_tokenizer

            m = self.model_config
            self.tokenizer = hf_tokenizer(m.tokenizer_path or m.path, trust_remote_code=bool(m.trust_remote_code))

    def _inputs(self, data: DataProto) -> dict[str, torch.Tensor]:
        """The student's prompt + response, or with a privileged context the teacher's own prompt."""
        b = data.batch
        pc = self.config.privileged_context
        if pc.key is None:
            return {k: b[k] for k in _INPUTS}
        from verl.trainer.distillation.privileged_context import context_texts, privileged_inputs

        n_resp = b["responses"].shape[-1]
        texts = context_texts(data.non_tensor_batch, str(pc.key), str(pc.template))
        contexts = [self.tokenizer.encode(t, add_special_tokens=False) for t in texts]
        inputs = privileged_inputs(
            b["input_ids"][:, :-n_resp], b["attention_mask"][:, :-n_resp], b["responses"],
            b["attention_mask"][:, -n_resp:], contexts, str(pc.position), int(self.tokenizer.pad_token_id),
        )
        limit = self.config.inference.max_model_len
        longest = int(inputs["attention_mask"].sum(-1).max())
        if limit is not None and longest > int(limit):
            raise ValueError(
                f"teacher {self.config.key!r}: an input with its privileged context has {longest} tokens, more "
                f"than inference.max_model_len={limit}"
            )
        return inputs

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_teacher_log_probs(self, data: DataProto) -> DataProto:
        """``teacher_logprobs`` and ``teacher_ids`` [N, R, K] of this worker's rows (see the module doc)."""
        inputs = self._inputs(data)
        rows = int(self.config.inference.max_num_seqs)
        n = inputs["responses"].shape[0]
        micro_batches = [{k: v[i : i + rows] for k, v in inputs.items()} for i in range(0, n, rows)]
        out = self.engine.infer(micro_batches, temperature=float(self.config.inference.temperature), topk=self.topk)
        if self.topk:
            log_probs, ids = out["topk_log_probs"], out["topk_ids"]
        else:
            log_probs, ids = out["log_probs"].unsqueeze(-1), inputs["responses"].unsqueeze(-1)
        return DataProto.from_dict(tensors={"teacher_logprobs": log_probs.float(), "teacher_ids": ids.long()})
