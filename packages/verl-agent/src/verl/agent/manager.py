"""`AgentLoopManager`: prompt DataProto in, response DataProto out, through agent loops.

Each row runs in the loop its ``agent_name`` names (else ``rollout.agent.default_agent_loop``);
at most ``rollout.agent.num_workers`` loops run at once (they share one `AsyncLLMServer`, which
batches their concurrent requests). The output has the contract's keys (docs/contracts.md:
``prompts``, ``responses``, ``response_mask``, ``input_ids``, ``attention_mask``, ``position_ids``,
``rollout_log_probs``; ``token_versions`` too, the weights version of each model token, -1 elsewhere,
when every loop reports them: `AgentLoopOutput.response_versions`), where ``response_mask`` is 0 on tool /
user tokens while ``attention_mask`` is 1 on every real token; non-tensors ``num_turns``, ``stop_reason`` and the
agent's rewards, which verl-rewards' managers add to the token-level reward (weighted, see
``verl.rewards.managers.base``): ``reward_score`` (the trajectory's reward from an interaction or an
endpoint agent; NaN when none), ``tool_rewards`` / ``turn_scores`` (lists of step rewards: tool
calls, interaction turns) with ``tool_reward_positions`` / ``turn_score_positions`` (the response
index of the last token of the assistant turn each rewards); every other key a loop puts in
``AgentLoopOutput.extra_fields`` (e.g. ``messages``, the conversation; upstream passes them all on too),
one object per row, None for rows whose loop did not set it; and ``meta_info["metrics"]`` with
per-row lists under ``agent/<name>`` (the trainer averages them), e.g. ``agent/has_tool_call``.

``rollout.agent.agent_loop_config_path`` names a YAML list of loops (upstream's format)::

    - name: my_agent                          # rows pick it with agent_name (or default_agent_loop)
      _target_: my_pkg.agents.MyAgentLoop     # an AgentLoopBase subclass (dotted path or registered name)
      max_steps: 5                            # any other key: a constructor argument of the loop
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.agent.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.agent.server import AsyncLLMServer
from verl.registries import AGENT_LOOPS

# Row fields handed to loops besides the non-tensor batch (tensors are rebuilt from raw_prompt).
_SKIP_FIELDS = ("uid",)
# Per-row lists of step rewards (AgentLoopOutput.extra_fields) that go into the batch.
STEP_REWARD_FIELDS = ("tool_rewards", "tool_reward_positions", "turn_scores", "turn_score_positions")


def load_agent_loop_configs(path: str | Path) -> dict[str, tuple[type[AgentLoopBase], dict[str, Any]]]:
    """``{name: (loop class, constructor kwargs)}`` from an agent-loop YAML file (see module doc)."""
    import yaml
    from verl.agent.tools.loader import resolve_class

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"actor_rollout_ref.rollout.agent.agent_loop_config_path={str(path)!r}: no such file")
    entries = yaml.safe_load(path.read_text())
    if not isinstance(entries, list):
        raise ValueError(f"agent loop config {path}: expected a YAML list of {{name, _target_, ...}} entries")
    out: dict[str, tuple[type[AgentLoopBase], dict[str, Any]]] = {}
    for i, entry in enumerate(entries):
        where = f"agent loop config {path}, entry {i}"
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("_target_"):
            raise ValueError(f"{where}: each entry needs 'name' and '_target_' (the loop class), got {entry!r}")
        kwargs = {k: v for k, v in entry.items() if k not in ("name", "_target_")}
        cls = resolve_class(str(entry["_target_"]), AGENT_LOOPS, where)
        if not (isinstance(cls, type) and issubclass(cls, AgentLoopBase)):
            raise TypeError(f"{where}: _target_ {entry['_target_']!r} is not an AgentLoopBase subclass")
        if entry["name"] in out:
            raise ValueError(f"{where}: loop name {entry['name']!r} is used twice")
        out[str(entry["name"])] = (cls, kwargs)
    return out


def sampling_params_from(config: Any, meta_info: dict[str, Any]) -> dict[str, Any]:
    """The per-call sampling settings: rollout config, meta_info overrides, ``val_kwargs`` when validating."""
    if meta_info.get("validate", False):
        val = config.val_kwargs
        return {
            "do_sample": bool(meta_info.get("do_sample", val.do_sample)),
            "temperature": float(val.temperature) if val.temperature > 0 else float(config.temperature),
            "top_k": int(val.top_k),
            "top_p": float(val.top_p),
        }
    return {
        "do_sample": bool(meta_info.get("do_sample", config.do_sample)),
        "temperature": float(meta_info.get("temperature", config.temperature)),
        "top_k": int(meta_info.get("top_k", config.top_k)),
        "top_p": float(meta_info.get("top_p", config.top_p)),
    }


def row_seed(seed: int, global_step: int, validate: bool, row: int) -> int:
    """A row's sampling seed: fixed by the worker's seed, the step, the phase and the row's place in
    the worker's batch, never by timing (loops reach the model in an order that timing decides)."""
    digest = hashlib.sha256(f"{seed}/{global_step}/{int(validate)}/{row}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**63 - 1)


class AgentLoopManager:
    """Runs agent loops over a batch. ``loop_kwargs`` go to every loop's constructor (e.g. ``tools``);
    ``seed`` (the worker's ``rollout.seed + rank``) makes sampling reproducible per row (`row_seed`)."""

    def __init__(
        self,
        config: Any,
        server: AsyncLLMServer,
        tokenizer: Any,
        *,
        pad_token_id: int | None = None,
        max_concurrency: int | None = None,
        loop_kwargs: dict[str, Any] | None = None,
        seed: int | None = None,
    ):
        self.config = config
        self.server = server
        self.tokenizer = tokenizer
        pad = pad_token_id if pad_token_id is not None else tokenizer.pad_token_id
        if pad is None:
            raise ValueError(
                "AgentLoopManager needs a pad token id (tokenizer.pad_token_id or pad_token_id=)"
            )
        self.pad_token_id = int(pad)
        self.max_concurrency = int(max_concurrency or config.agent.num_workers)
        if self.max_concurrency < 1:
            raise ValueError(f"rollout.agent.num_workers must be >= 1, got {self.max_concurrency}")
        self.loop_kwargs = dict(loop_kwargs or {})
        self.seed = seed
        path = config.agent.agent_loop_config_path
        # Loops named in the file take precedence over registered ones of the same name.
        self.loop_configs = load_agent_loop_configs(path) if path else {}
        self._loops: dict[str, AgentLoopBase] = {}

    def loop(self, name: str) -> AgentLoopBase:
        """The (shared) loop instance for ``name``: from the agent-loop file, else the registry."""
        if name not in self._loops:
            if name in self.loop_configs:
                cls, kwargs = self.loop_configs[name]
            else:
                try:
                    cls, kwargs = AGENT_LOOPS.get(name), {}
                except KeyError as e:
                    in_file = f"; in agent_loop_config_path: {sorted(self.loop_configs)}" if self.loop_configs else ""
                    raise KeyError(f"{e.args[0]}{in_file}") from e
            self._loops[name] = cls(
                config=self.config, server=self.server, tokenizer=self.tokenizer, **{**self.loop_kwargs, **kwargs}
            )
        return self._loops[name]

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Synchronous entry (workers, trainer): runs `agenerate` in a fresh event loop."""
        return asyncio.run(self.agenerate(prompts))

    async def agenerate(self, prompts: DataProto) -> DataProto:
        n = len(prompts)
        ntb = prompts.non_tensor_batch
        if "raw_prompt" not in ntb:
            raise KeyError(
                f"agent loops need the chat messages of each row in non_tensor_batch['raw_prompt']; "
                f"got keys {sorted(ntb)} (set data.return_raw_chat=True)"
            )
        sampling = sampling_params_from(self.config, prompts.meta_info)
        default = str(self.config.agent.default_agent_loop)
        gate = asyncio.Semaphore(self.max_concurrency)

        step = int(prompts.meta_info.get("global_steps", 0))
        validate = bool(prompts.meta_info.get("validate", False))

        async def one(i: int) -> AgentLoopOutput:
            row = {k: v[i] for k, v in ntb.items() if k not in _SKIP_FIELDS}
            name = row.pop("agent_name", None) or default
            row["request_id"] = f"{ntb['uid'][i] if 'uid' in ntb else uuid.uuid4()}-{i}"
            params = dict(sampling)
            if self.seed is not None and params["do_sample"]:
                params["seed"] = row_seed(self.seed, step, validate, i)
            async with gate:
                return await self.loop(str(name)).run(params, **row)

        outputs = await asyncio.gather(*(one(i) for i in range(n)))
        return self.to_dataproto(outputs)

    def to_dataproto(self, outputs: list[AgentLoopOutput]) -> DataProto:
        """Pad and stack loop outputs into the contract's tensors (prompts left, responses right)."""
        n = len(outputs)
        # Fixed widths (the configured lengths, or more if a row overflows them): every data-parallel
        # rank returns the same shapes, which DataProto.concat of the ranks' outputs needs; ranks run
        # their loops independently, so "longest in this batch" would differ between them.
        p = max(int(self.config.prompt_length), max(len(o.prompt_ids) for o in outputs))
        r = max(1, int(self.config.response_length), max(len(o.response_ids) for o in outputs))
        prompts = torch.full((n, p), self.pad_token_id, dtype=torch.long)
        prompt_mask = torch.zeros((n, p), dtype=torch.long)
        responses = torch.full((n, r), self.pad_token_id, dtype=torch.long)
        response_mask = torch.zeros((n, r), dtype=torch.long)
        response_attn = torch.zeros((n, r), dtype=torch.long)
        log_probs = torch.zeros((n, r), dtype=torch.float32)
        for i, o in enumerate(outputs):
            lp, lr = len(o.prompt_ids), len(o.response_ids)
            prompts[i, p - lp :] = torch.tensor(o.prompt_ids, dtype=torch.long)
            prompt_mask[i, p - lp :] = 1
            if lr:
                responses[i, :lr] = torch.tensor(o.response_ids, dtype=torch.long)
                response_mask[i, :lr] = torch.tensor(o.response_mask, dtype=torch.long)
                response_attn[i, :lr] = 1
                if o.response_logprobs is not None:
                    log_probs[i, :lr] = torch.tensor(o.response_logprobs, dtype=torch.float32)
        attention_mask = torch.cat([prompt_mask, response_attn], dim=1)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        tensors = {
            "prompts": prompts,
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": position_ids,
        }
        if self.config.calculate_log_probs:  # as the plain rollouts: the sampling log-probs only when asked for
            tensors["rollout_log_probs"] = log_probs
        if all(o.response_versions is not None for o in outputs):
            versions = torch.full((n, r), -1, dtype=torch.long)
            for i, o in enumerate(outputs):
                versions[i, : len(o.response_versions)] = torch.tensor(o.response_versions, dtype=torch.long)
            tensors["token_versions"] = versions
        non_tensors = {
            "num_turns": np.array([o.num_turns for o in outputs], dtype=np.int64),
            "reward_score": np.array(
                [np.nan if o.reward_score is None else o.reward_score for o in outputs], dtype=np.float64
            ),
            "stop_reason": np.array(
                [str(o.extra_fields.get("stop_reason", "")) for o in outputs], dtype=object
            ),
        }
        for key in STEP_REWARD_FIELDS:
            column = np.empty(n, dtype=object)  # filled one by one: lists must stay lists, not a 2-D array
            for i, o in enumerate(outputs):
                column[i] = list(o.extra_fields.get(key, []))
            non_tensors[key] = column
        # The loops' other extra fields (reward managers read them, e.g. a conversation to judge).
        handled = {"stop_reason", *STEP_REWARD_FIELDS, *non_tensors}
        for key in sorted({k for o in outputs for k in o.extra_fields} - handled):
            column = np.empty(n, dtype=object)
            for i, o in enumerate(outputs):
                column[i] = o.extra_fields.get(key)
            non_tensors[key] = column
        metric_names = sorted({k for o in outputs for k in o.metrics})
        metrics: dict[str, list[float]] = {
            f"agent/{k}": [float(o.metrics.get(k, 0.0)) for o in outputs] for k in metric_names
        }
        metrics["agent/num_turns"] = [float(o.num_turns) for o in outputs]
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info={"metrics": metrics})
