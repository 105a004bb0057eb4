"""The actor update pass, before vs after the issue-25 changes, alternating in one process.

Two actors built as the trainer builds them (the ``fsdp2`` engine on CPU, one rank) from the same
random-init model of ``assets.py``: ``old`` runs the engine's head code of commit ``--before`` (default
38d3f70: full-length logits, division by the temperature, a second softmax for the metric entropy)
and foreach AdamW; ``new`` is the working tree (fused AdamW, LM head on the response positions, entropy
from the log-softmax). The first update of each from the same weights must give the same metrics and
weights (asserted); then ``rounds`` updates of each alternate (old/new, new/old, ...) on the benchmark's
batch (64 rows, 4-token prompt, ``new_tokens`` response tokens, fp32, 2 threads, use_rollout_log_probs,
entropy_coeff 0, no KL) and the medians of wall and CPU seconds and of the per-round new/old ratios print.

    uv run python benchmarks/grpo_step/update_pass.py s 64 6
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

torch.set_num_threads(2)
sys.path.insert(0, str(Path(__file__).parent))

import assets  # noqa: E402 (after the thread count and sys.path)
import torch.distributed as dist  # noqa: E402 (after the thread count and sys.path)
from verl import DataProto  # noqa: E402 (after the thread count and sys.path)
from verl.trainer.config import load_config  # noqa: E402 (after the thread count and sys.path)
from verl.workers.actor import DataParallelPPOActor  # noqa: E402 (after the thread count and sys.path)
from verl.workers.engine.testing import actor_engine  # noqa: E402 (after the thread count and sys.path)

before = os.environ.get("BEFORE", "38d3f70")
_old_src = subprocess.run(
    ["git", "show", f"{before}:packages/verl-workers/src/verl/workers/engine/hf_model.py"],
    check=True,
    capture_output=True,
    text=True,
    cwd=Path(__file__).parent,
).stdout
_old_file = Path(tempfile.mkdtemp()) / "hf_model_old.py"
_old_file.write_text(_old_src)
spec = importlib.util.spec_from_file_location("hf_model_old", _old_file)
old_hf = importlib.util.module_from_spec(spec)
sys.modules["hf_model_old"] = old_hf
spec.loader.exec_module(old_hf)

size, R, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])  # e.g. s 64 6
path = assets.ensure_model(size, Path(os.environ.get("MODEL_ROOT", "/tmp/grpo_update_models")))
dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
cfg = load_config(
    [
        f"actor_rollout_ref.model.path={path}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.grad_clip=1.0",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0.0",
        "actor_rollout_ref.actor.use_rollout_log_probs=true",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
    ],
)
arr = cfg.actor_rollout_ref


def make(variant):
    eng = actor_engine(arr, 100, grad_clip=1.0)
    if variant == "old":
        o = arr.actor.optim
        eng.optimizer = torch.optim.AdamW(
            [p for p in eng.module.parameters() if p.requires_grad],
            lr=float(o.lr),
            betas=tuple(float(b) for b in o.betas),
            weight_decay=float(o.weight_decay),
            foreach=True,
        )
        eng.lr_scheduler = __import__("verl.workers.engine.optim", fromlist=["x"]).build_lr_scheduler(
            eng.optimizer, o, 100
        )

        def fmb(mb, *, temperature=1.0, calculate_entropy=False, entropy_grad=True, _e=eng):
            return old_hf.response_outputs(
                _e.module,
                _e._to_device(mb),
                _e.model_type,
                temperature=temperature,
                calculate_entropy=calculate_entropy,
                entropy_grad=entropy_grad,
                remove_padding=_e.remove_padding,
                compute_dtype=_e.precision.param_dtype,
                head=old_hf.HeadOptions(),
            )

        eng.forward_micro_batch = fmb
    else:
        assert eng.optimizer.defaults["fused"]
    return DataParallelPPOActor(arr.actor, eng, ppo_mini_batch_size_per_rank=64)


actors = {"old": make("old"), "new": make("new")}
g = torch.Generator().manual_seed(0)
N, P = 64, 4
ids = torch.randint(3, 101, (N, P + R), generator=g)
data = DataProto.from_dict(
    tensors=dict(
        input_ids=ids,
        attention_mask=torch.ones(N, P + R, dtype=torch.long),
        position_ids=torch.arange(P + R).expand(N, -1).clone(),
        responses=ids[:, P:].clone(),
        response_mask=torch.ones(N, R, dtype=torch.long),
        old_log_probs=-torch.rand(N, R, generator=g) * 3 - 2,
        advantages=torch.randn(N, R, generator=g),
    ),
    meta_info={"temperature": 1.0, "global_steps": 1},
)
# equality: the first updates from the same weights
m = {k: a.update_policy(data) for k, a in actors.items()}
for key in m["old"]:
    assert abs(m["old"][key] - m["new"][key]) <= 1e-5 * max(1.0, abs(m["old"][key])), (
        key,
        m["old"][key],
        m["new"][key],
    )
pm = {k: {n: p.detach() for n, p in a.engine.module.named_parameters()} for k, a in actors.items()}
maxdiff = max(float((pm["old"][n] - pm["new"][n]).abs().max()) for n in pm["old"])
print(f"equal after one update: metrics {sorted(m['new'])} max |w_old - w_new| = {maxdiff:.2e}", flush=True)
assert maxdiff < 1e-6
rec = {"old": [], "new": []}
for r in range(rounds):
    for k in ("old", "new") if r % 2 == 0 else ("new", "old"):
        t, c = time.perf_counter(), time.process_time()
        actors[k].update_policy(data)
        rec[k].append((time.perf_counter() - t, time.process_time() - c))


def med(xs):
    return sorted(xs)[len(xs) // 2]


ratios_w = [n[0] / o[0] for o, n in zip(rec["old"], rec["new"])]
ratios_c = [n[1] / o[1] for o, n in zip(rec["old"], rec["new"])]
print(
    f"{size}/{R}: {rounds} rounds; old wall {med([x[0] for x in rec['old']]):.3f} s cpu {med([x[1] for x in rec['old']]):.3f} s | "
    f"new wall {med([x[0] for x in rec['new']]):.3f} s cpu {med([x[1] for x in rec['new']]):.3f} s | "
    f"median new/old wall {med(ratios_w):.3f} cpu {med(ratios_c):.3f}; load {os.getloadavg()[0]:.1f}"
)
