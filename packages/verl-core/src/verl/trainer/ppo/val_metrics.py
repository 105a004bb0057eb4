"""Validation metrics as upstream verl reports them: mean@N, std@N and bootstrap best@k / worst@k / maj@k.

Re-exported by ``verl.trainer.ppo.metric_utils`` (upstream's home of these names).

For every data source, every prompt (``uid``) and every numeric variable (``reward``, ``acc``, any
numeric key the reward function returns) the N responses of the prompt give

- ``mean@N``, ``std@N`` (population std; only for N > 1);
- for k in 2, 4, 8, ... below N, and N itself: ``best@k/mean``, ``best@k/std`` (``worst@k/...``): the
  mean and std, over ``n_bootstrap`` resamples of k responses drawn with replacement, of the best
  (worst) value among the k. With a 0/1 accuracy, ``best@k/mean`` estimates pass@k;
- ``maj@k/mean``, ``maj@k/std`` when a ``pred`` variable holds each response's final answer (one per
  value, none missing): the value of the majority answer among the k drawn responses (the first
  drawn response with that answer; ties go to the answer drawn first).

Each metric is then averaged over the prompts of the data source. The resamples are drawn as
upstream draws them (``numpy.random.seed(seed)`` then ``choice(N, (n_bootstrap, k))``, the same
indices for every variable and k), from a private ``RandomState`` so the global numpy RNG is left
alone; with the same ``seed`` the numbers equal upstream's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

N_BOOTSTRAP = 1000


def bootstrap_metric(
    data: list[Any],
    subset_size: int,
    reduce_fns: list[Callable[[np.ndarray], float]],
    n_bootstrap: int = N_BOOTSTRAP,
    seed: int = 42,
) -> list[tuple[float, float]]:
    """(mean, std) over ``n_bootstrap`` resamples of ``subset_size`` items (with replacement) of each
    ``reduce_fn`` applied to the resample (an object array); one pair per function."""
    idx = _bootstrap_indices(len(data), subset_size, n_bootstrap, seed)
    items = np.empty(len(data), dtype=object)
    for i, item in enumerate(data):  # element-wise: equal-length lists must not become a 2-D array
        items[i] = item
    out = []
    for fn in reduce_fns:
        stats = np.array([float(fn(items[row])) for row in idx], dtype=np.float64)
        out.append((float(stats.mean()), float(stats.std())))
    return out


def calc_maj_val(data: list[dict[str, Any]], vote_key: str, val_key: str) -> float:
    """The ``val_key`` of the first item whose ``vote_key`` is the most common one (ties: the vote
    seen first)."""
    first_val: dict[Any, Any] = {}
    counts: dict[Any, int] = defaultdict(int)
    for item in data:
        vote = item[vote_key]
        first_val.setdefault(vote, item[val_key])
        counts[vote] += 1
    winner = max(counts, key=counts.__getitem__)  # max keeps the first of equal counts
    return first_val[winner]


def _bootstrap_indices(n_data: int, subset_size: int, n_bootstrap: int, seed: int) -> np.ndarray:
    # the legacy seeded generator draws exactly what upstream's np.random.seed + np.random.choice draw
    return np.random.RandomState(seed).choice(n_data, size=(n_bootstrap, subset_size), replace=True)


def _subset_sizes(n: int) -> list[int]:
    """2, 4, 8, ... below n, then n (nothing for n <= 1)."""
    if n <= 1:
        return []
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return sizes + [n]


def _is_number(x: Any) -> bool:
    return isinstance(x, bool | int | float | np.number)


def _majority_values(values: np.ndarray, preds: list[Any], idx: np.ndarray) -> np.ndarray:
    """``calc_maj_val`` of every resample at once: per row of ``idx``, the value at the first position
    whose pred has the highest count (ties: the pred whose first appearance comes first)."""
    codes_of: dict[Any, int] = {}
    codes = np.array([codes_of.setdefault(p, len(codes_of)) for p in preds])
    n_codes, k = len(codes_of), idx.shape[1]
    out = np.empty(len(idx), dtype=values.dtype)
    step = max(1, 4_000_000 // (k * n_codes))  # bound the [rows, k, codes] boolean block
    for start in range(0, len(idx), step):
        rows = idx[start : start + step]
        hits = codes[rows][:, :, None] == np.arange(n_codes)[None, None, :]  # [rows, k, codes]
        counts = hits.sum(axis=1)
        first = np.where(hits.any(axis=1), hits.argmax(axis=1), k)  # first position; k if not drawn
        first = np.where(counts == counts.max(axis=1, keepdims=True), first, k)
        out[start : start + step] = values[rows[np.arange(len(rows)), first.min(axis=1)]]
    return out


def _prompt_metrics(values: list[float], preds: list[Any] | None, seed: int) -> dict[str, float]:
    n = len(values)
    vals = np.asarray(values, dtype=np.float64)
    metric = {f"mean@{n}": float(vals.mean())}
    if n <= 1:
        return metric
    metric[f"std@{n}"] = float(vals.std())
    for k in _subset_sizes(n):
        idx = _bootstrap_indices(n, k, N_BOOTSTRAP, seed)
        drawn = vals[idx]
        for name, stat in (("best", drawn.max(axis=1)), ("worst", drawn.min(axis=1))):
            metric[f"{name}@{k}/mean"] = float(stat.mean())
            metric[f"{name}@{k}/std"] = float(stat.std())
        if preds is not None:
            maj = _majority_values(vals, preds, idx)
            metric[f"maj@{k}/mean"] = float(maj.mean())
            metric[f"maj@{k}/std"] = float(maj.std())
    return metric


def process_validation_metrics(
    data_sources: Sequence[str],
    sample_uids: Sequence[str],
    infos_dict: Mapping[str, Sequence[Any]],
    seed: int = 42,
    expected_acc_counts: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """``{data_source: {variable: {metric: value}}}`` (see the module doc for the metrics).

    ``infos_dict`` maps each variable to one value per sample (aligned with ``data_sources`` and
    ``sample_uids``); ``None`` values are skipped, non-numeric variables (e.g. ``pred``) get no
    metrics of their own. ``expected_acc_counts[(source, uid)]``, when given, is the number of
    responses a prompt should have had: for sources that report ``acc``, the missing ones count as
    ``acc=0`` and ``acc_success_only`` keeps the metric over the responses that exist.
    """
    n = len(data_sources)
    if len(sample_uids) != n:
        raise ValueError(f"process_validation_metrics: {n} data_sources but {len(sample_uids)} sample_uids")
    for var, vals in infos_dict.items():
        if len(vals) != n:
            raise ValueError(f"process_validation_metrics: infos_dict[{var!r}] has {len(vals)} values for {n} samples")

    grouped: dict[str, dict[Any, dict[str, list]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for i, (src, uid) in enumerate(zip(data_sources, sample_uids)):
        for var, vals in infos_dict.items():
            grouped[src][uid][var].append(vals[i])
    if expected_acc_counts:
        _fill_missing_acc(grouped, expected_acc_counts)

    per_metric: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for src, by_uid in grouped.items():
        for var2vals in by_uid.values():
            preds = var2vals.get("pred")
            for var, raw in var2vals.items():
                values = [v for v in raw if v is not None]
                if not values or not all(_is_number(v) for v in values):
                    continue
                has_pred = preds is not None and len(preds) == len(values) and all(p is not None for p in preds)
                metrics = _prompt_metrics(values, list(preds) if has_pred else None, seed)
                for name, value in metrics.items():
                    per_metric[src][var][name].append(value)
    return {
        src: {var: {name: float(np.mean(v)) for name, v in names.items()} for var, names in by_var.items()}
        for src, by_var in per_metric.items()
    }


def _fill_missing_acc(grouped: dict, expected_acc_counts: Mapping[tuple[str, str], int]) -> None:
    sources_with_acc = {
        src for src, by_uid in grouped.items()
        if any(v is not None for var2vals in by_uid.values() for v in var2vals.get("acc", []))
    }
    for (src, uid), expected in expected_acc_counts.items():
        if src not in sources_with_acc:
            continue  # a source without acc does not get a synthetic one
        var2vals = grouped[src][uid]
        observed = [v for v in var2vals.get("acc", []) if v is not None]
        var2vals["acc_success_only"] = observed
        var2vals["acc"] = observed + [0.0] * max(expected - len(observed), 0)


def val_metrics_dict(
    data_sources: Sequence[str],
    sample_uids: Sequence[str],
    infos_dict: Mapping[str, Sequence[Any]],
    sample_turns: Sequence[int] | None = None,
    seed: int = 42,
) -> dict[str, float]:
    """Upstream's flat validation metric names: ``val-core/<source>/<var>/<metric>`` for the core
    variable (``acc`` if the source reports it, else ``reward``) and its ``mean``/``best``/``maj``
    metrics at the largest N, ``val-aux/...`` for the rest, and ``val-aux/num_turns/{min,max,mean}``."""
    nested = process_validation_metrics(data_sources, sample_uids, infos_dict, seed=seed)
    out: dict[str, float] = {}
    for src, by_var in nested.items():
        core_var = "acc" if "acc" in by_var else "reward"
        for var, metrics in by_var.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in metrics)
            for name, value in metrics.items():
                core = (
                    var == core_var
                    and name.startswith(("mean", "maj", "best"))
                    and f"@{n_max}" in name
                )
                out[f"{'val-core' if core else 'val-aux'}/{src}/{var}/{name}"] = value
    if sample_turns is not None and len(sample_turns):
        turns = np.asarray(sample_turns)
        out["val-aux/num_turns/min"] = float(turns.min())
        out["val-aux/num_turns/max"] = float(turns.max())
        out["val-aux/num_turns/mean"] = float(turns.mean())
    return out
