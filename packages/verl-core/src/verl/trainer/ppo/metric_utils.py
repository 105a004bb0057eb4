"""Metrics the PPO trainer logs per step: data statistics, timing, throughput, validation.

Names follow upstream verl (``critic/score/mean``, ``response_length/mean``, ``timing_s/gen``,
``perf/throughput``, ``val-core/<source>/<var>/mean@N`` ...) so dashboards port unchanged. The
validation statistics (bootstrap best@k / worst@k / maj@k) live in ``val_metrics``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping

import torch

from verl.protocol import DataProto
from verl.trainer.ppo.val_metrics import (  # upstream keeps these here
    bootstrap_metric,
    calc_maj_val,
    process_validation_metrics,
    val_metrics_dict,
)
from verl.utils.metric import reduce_metrics  # upstream's: max / min by the name, else the mean

__all__ = [
    "bootstrap_metric",
    "calc_maj_val",
    "compute_data_metrics",
    "compute_throughout_metrics",
    "compute_timing_metrics",
    "marked_timer",
    "process_validation_metrics",
    "reduce_metrics",
    "val_metrics_dict",
]


@contextlib.contextmanager
def marked_timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    """Add the wall time of the block to ``timing_raw[name]`` (seconds; accumulates on repeats)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - start


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {f"{prefix}/mean": float("nan"), f"{prefix}/max": float("nan"), f"{prefix}/min": float("nan")}
    values = values.float()
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def _prompt_and_response_lengths(batch: DataProto) -> tuple[torch.Tensor, torch.Tensor]:
    response_mask = batch.batch["response_mask"]
    resp_len = response_mask.shape[-1]
    prompt_mask = batch.batch["attention_mask"][:, :-resp_len]
    return prompt_mask.sum(-1).float(), response_mask.sum(-1).float()


def compute_data_metrics(batch: DataProto, use_critic: bool = True) -> dict[str, float]:
    """Scores, rewards, advantages, returns, values and lengths of one training batch."""
    b = batch.batch
    mask = b["response_mask"].bool()
    prompt_length, response_length = _prompt_and_response_lengths(batch)
    metrics: dict[str, float] = {}
    metrics.update(_stats("critic/score", b["token_level_scores"].sum(-1)))
    if "token_level_rewards" in b:
        metrics.update(_stats("critic/rewards", b["token_level_rewards"].sum(-1)))
    if "advantages" in b:
        metrics.update(_stats("critic/advantages", b["advantages"][mask]))
    if "returns" in b:
        metrics.update(_stats("critic/returns", b["returns"][mask]))
    if use_critic and "values" in b:
        values, returns = b["values"][mask], b["returns"][mask]
        metrics.update(_stats("critic/values", values))
        # 1 - Var(returns - values) / Var(returns): how much of the return the critic explains.
        var_ret = torch.var(returns.float())
        metrics["critic/vf_explained_var"] = (1.0 - torch.var((returns - values).float()) / (var_ret + 1e-5)).item()
    max_resp = b["response_mask"].shape[-1]
    max_prompt = b["attention_mask"].shape[-1] - max_resp
    metrics.update(_stats("response_length", response_length))
    metrics["response_length/clip_ratio"] = (response_length >= max_resp).float().mean().item()
    metrics.update(_stats("prompt_length", prompt_length))
    metrics["prompt_length/clip_ratio"] = (prompt_length >= max_prompt).float().mean().item()
    return metrics


def compute_timing_metrics(batch: DataProto, timing_raw: Mapping[str, float]) -> dict[str, float]:
    """``timing_s/<stage>`` and ``timing_per_token_ms/<stage>`` (per response or all tokens)."""
    prompt_length, response_length = _prompt_and_response_lengths(batch)
    n_prompt, n_resp = prompt_length.sum().item(), response_length.sum().item()
    # Stages that only look at responses are normalised by response tokens, the rest by all tokens.
    tokens = {"gen": n_resp, "reward": n_resp}
    out = {f"timing_s/{k}": v for k, v in timing_raw.items()}
    for k, v in timing_raw.items():
        if k == "step":
            continue
        n = tokens.get(k, n_prompt + n_resp)
        if n > 0:
            out[f"timing_per_token_ms/{k}"] = v * 1000.0 / n
    return out


def compute_throughout_metrics(batch: DataProto, timing_raw: Mapping[str, float], n_gpus: int) -> dict[str, float]:
    """Tokens per step and tokens per second per worker (upstream's spelling of the function name)."""
    total_tokens = float(sum(batch.meta_info["global_token_num"]))
    step_time = timing_raw["step"]
    return {
        "perf/total_num_tokens": total_tokens,
        "perf/time_per_step": step_time,
        "perf/throughput": total_tokens / (step_time * max(n_gpus, 1)) if step_time > 0 else float("nan"),
    }
