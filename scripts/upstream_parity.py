"""Run the same calls through upstream verl and through ours and compare the numbers.

    uv run python scripts/upstream_parity.py --upstream-python /path/to/upstream-venv/bin/python

The payload below is executed twice, once by each interpreter (upstream verl installed in the other
venv, ours from this workspace), and prints JSON; the results are compared key by key. Covered:
``agg_loss`` and ``compute_value_loss`` with upstream's dp_size / batch_num_tokens / global_batch_size /
loss_scale_factor, REINFORCE++ returns over a masked observation span, grpo_vectorized /
rloo_vectorized (groups of two or more: for a group of one we give 0 where upstream gives the raw
score), the DRO loss, process_validation_metrics (bootstrap best/worst/maj at seed 7) and
DataProto.unfold_column_chunks. Exit status 1 on any difference above --tol.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

PAYLOAD = r'''
import json
from types import SimpleNamespace
import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo import core_algos as ca
from verl.trainer.ppo.metric_utils import process_validation_metrics

out = {}
g = torch.Generator().manual_seed(3)
loss = torch.randn(5, 7, generator=g, dtype=torch.float64)
mask = (torch.rand(5, 7, generator=g) > 0.4).double()
for mode in ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]:
    out[f"agg/{mode}/local"] = ca.agg_loss(loss, mask, mode).item()
    out[f"agg/{mode}/global"] = ca.agg_loss(loss, mask, mode, 4, 31, 9, 6).item()
v, r, o = (torch.randn(5, 7, generator=g, dtype=torch.float64) for _ in range(3))
vl, vc = ca.compute_value_loss(v, r, o, mask, 0.3, "token-mean", 2, 30, 8, None)
out["value_loss"], out["value_clipfrac"] = vl.item(), vc.item()

adv, ret = ca.compute_reinforce_plus_plus_outcome_advantage(
    torch.tensor([[0.0, 0.0, 0.0, 0.0, 2.0], [0.0, 1.0, 0.0, 0.0, 0.0]]),
    torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0, 0.0]]), config=SimpleNamespace(gamma=0.5))
out["rfpp/returns"], out["rfpp/advantages"] = ret.flatten().tolist(), adv.flatten().tolist()

scores = torch.tensor([1.0, 0.0, 0.5, 2.0, 2.0, 3.0, -1.0])
rewards = torch.zeros(7, 3); rewards[:, -1] = scores
rmask = torch.ones(7, 3)
index = np.array(["x", "x", "x", "y", "y", "z", "z"], dtype=object)
for name in ("grpo_vectorized", "rloo_vectorized", "grpo", "rloo"):
    a, _ = ca.get_adv_estimator_fn(name)(token_level_rewards=rewards, response_mask=rmask, index=index)
    out[f"adv/{name}"] = a[:, 0].tolist()

cfg = SimpleNamespace(policy_loss=SimpleNamespace(dro_beta=0.5), global_batch_info={})
lp = torch.randn(3, 4, generator=g, dtype=torch.float64); old = torch.randn(3, 4, generator=g, dtype=torch.float64)
A = torch.randn(3, 4, generator=g, dtype=torch.float64); m = (torch.rand(3, 4, generator=g) > 0.3).double()
pg, metrics = ca.get_policy_loss_fn("dro")(old, lp, A, m, "token-mean", cfg)
out["dro/loss"], out["dro/ppo_kl"] = pg.item(), metrics["actor/ppo_kl"]

rng = np.random.RandomState(0)
src, uids, acc, score, pred = [], [], [], [], []
for p, n in enumerate([3, 5, 8, 8, 1]):
    for _ in range(n):
        src.append("a" if p < 3 else "b"); uids.append(f"u{p}")
        ans = str(rng.choice(["x", "y", "z"])); pred.append(ans)
        acc.append(float(ans == "x")); score.append(float(rng.rand()))
pred[7] = None
nested = process_validation_metrics(src, uids, {"acc": acc, "score": score, "pred": pred}, seed=7)
for s, by_var in nested.items():
    for var, ms in by_var.items():
        for k, x in ms.items():
            out[f"val/{s}/{var}/{k}"] = float(x)

d = DataProto.from_dict(tensors={"a": torch.arange(12).reshape(2, 6), "b": torch.tensor([10, 20])},
                        non_tensors={"g": np.arange(8).reshape(2, 4)})
u = d.unfold_column_chunks(2, split_keys=["a", "g"])
out["unfold/a"], out["unfold/b"], out["unfold/g"] = u.batch["a"].tolist(), u.batch["b"].tolist(), u.non_tensor_batch["g"].tolist()
print("PARITY_JSON " + json.dumps(out))
'''


def run(python: list[str]) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PAYLOAD)
    proc = subprocess.run([*python, f.name], capture_output=True, text=True, cwd=tempfile.gettempdir())
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PARITY_JSON ")]
    if proc.returncode or not lines:
        raise SystemExit(f"{' '.join(python)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("PARITY_JSON "))


def flat(x) -> list[float]:
    """Nested lists of numbers -> one flat list of floats."""
    if isinstance(x, list):
        return [v for item in x for v in flat(item)]
    return [float(x)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-python", required=True, help="python of a venv with upstream verl installed")
    ap.add_argument("--tol", type=float, default=1e-6)
    args = ap.parse_args()
    theirs, ours = run([args.upstream_python]), run([sys.executable])
    bad = 0
    for key in sorted(set(theirs) | set(ours)):
        if key not in theirs or key not in ours:
            print(f"ONLY {'ours' if key in ours else 'upstream'}: {key}")
            bad += 1
            continue
        a, b = flat(theirs[key]), flat(ours[key])
        diff = max((abs(x - y) for x, y in zip(a, b)), default=0.0) if len(a) == len(b) else float("inf")
        if diff > args.tol:
            print(f"DIFF {key}: upstream {theirs[key]} ours {ours[key]}")
            bad += 1
    print(f"{len(theirs)} upstream values, {len(ours)} ours, {bad} differ (tol {args.tol})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
