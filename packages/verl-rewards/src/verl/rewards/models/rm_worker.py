"""Discriminative reward model worker: a sequence-classification model scores whole trajectories.

``RewardModelWorker(config=cfg.reward.reward_model)`` with ``init_model()`` (ONE_TO_ALL) and
``compute_rm_score(data) -> DataProto{rm_scores}`` (DP_COMPUTE_PROTO). ``rm_scores`` is ``[N, R]``
with each row's score on its last valid response token, like a rule reward.

Config keys (upstream names)::

    model.path             the RM checkpoint (AutoModelForSequenceClassification, 1 label)
    model.input_tokenizer  the policy's tokenizer path; when given and the RM's tokenizer differs,
                           each conversation is decoded with it and re-templated for the RM
                           (needs the ``raw_prompt`` chat column; else the decoded prompt text
                           becomes one user message)
    model.trust_remote_code
    micro_batch_size_per_gpu   rows per forward pass (default 8)
    max_length             RM input limit; longer inputs lose their beginning (default 4096)

    model.fsdp_config.mixed_precision.param_dtype   the dtype the model runs in (default fp32)

``device`` (from the trainer: ``trainer.device`` resolved, ``cpu`` or ``cuda``) is where the model runs;
inputs go there and the scores come back to the CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    node = cfg
    for part in dotted.split("."):
        if node is None:
            return default
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return default if node is None else node


class RewardModelWorker(Worker):
    def __init__(self, config: Any, device: str | None = None, **_: Any):
        super().__init__()
        self.config = config
        self.device_name = device
        self.micro_batch_size = int(_get(config, "micro_batch_size_per_gpu", 8))
        self.max_length = int(_get(config, "max_length", 4096))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from verl.utils.device import set_worker_device
        from verl.utils.torch_dtypes import to_dtype

        self.device = set_worker_device(self.device_name)  # under Ray: the GPU Ray gave this actor

        path = _get(self.config, "model.path")
        if not path:
            raise ValueError(
                "reward.reward_model.model.path is not set (a sequence-classification checkpoint)"
            )
        trust = bool(_get(self.config, "model.trust_remote_code", False))
        self.rm_tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=1, trust_remote_code=trust,
            torch_dtype=to_dtype(_get(self.config, "model.fsdp_config.mixed_precision.param_dtype", "fp32"),
                                 "reward.reward_model.model.fsdp_config.mixed_precision.param_dtype"),
        ).to(self.device)
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.rm_tokenizer.pad_token_id
        self.model.eval()
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
        prompts, p_mask = (
            data.batch["prompts"],
            data.batch["attention_mask"][:, : data.batch["prompts"].shape[-1]],
        )
        raw = data.non_tensor_batch.get("raw_prompt")
        out = []
        for i in range(len(data)):
            response = tok_in.decode(responses[i, : int(resp_lengths[i])], skip_special_tokens=True)
            if raw is not None:
                chat = [dict(m) for m in raw[i]]
            else:
                chat = [
                    {
                        "role": "user",
                        "content": tok_in.decode(prompts[i][p_mask[i].bool()], skip_special_tokens=True),
                    }
                ]
            chat.append({"role": "assistant", "content": response})
            text = self.rm_tokenizer.apply_chat_template(chat, tokenize=False)
            out.append(self.rm_tokenizer(text, add_special_tokens=False)["input_ids"])
        return out

    def _forward(self, seqs: list[list[int]]) -> torch.Tensor:
        pad = self.model.config.pad_token_id
        scores = []
        for start in range(0, len(seqs), self.micro_batch_size):
            chunk = [s[-self.max_length :] for s in seqs[start : start + self.micro_batch_size]]
            width = max(len(s) for s in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for j, s in enumerate(chunk):
                # Left padding: every row's last real token sits at the end, where the head reads it
                # regardless of how a model family locates "the last non-pad token".
                ids[j, width - len(s) :] = torch.tensor(s, dtype=torch.long)
                mask[j, width - len(s) :] = 1
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            ids, mask, pos = ids.to(self.device), mask.to(self.device), pos.to(self.device)
            with torch.no_grad():
                hidden = self.model.base_model(
                    input_ids=ids, attention_mask=mask, position_ids=pos
                ).last_hidden_state
                logits = self.model.score(hidden[:, -1, :]) if self._has_score_head() else None
            if logits is None:
                with torch.no_grad():
                    logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
            scores.append(logits[:, 0].float().cpu())
        return torch.cat(scores)

    def _has_score_head(self) -> bool:
        # Llama/Qwen/Mistral-style classifiers name their head `score`; others go through the model.
        return isinstance(getattr(self.model, "score", None), torch.nn.Linear)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        from verl.rewards.managers.base import response_lengths

        lengths = response_lengths(data)
        if self.input_tokenizer is None:
            seqs = self._same_tokenizer_inputs(data)
        else:
            seqs = self._retemplated_inputs(data, lengths)
        scores = self._forward(seqs)
        rm = torch.zeros(data.batch["responses"].shape, dtype=torch.float32)
        rows = torch.arange(len(data))
        rm[rows, (lengths - 1).clamp(min=0)] = scores
        return DataProto.from_dict(tensors={"rm_scores": rm})
