"""The chaos suite's runs: the real trainer (Ray single controller, 2 FSDP2 CPU workers, the native rollout,
the exact-match rule reward) on a random-init xs Qwen2 and 16 addition prompts, a few steps each.

``rl_args(model, data, out, steps)`` gives the ``key=value`` overrides; ``run_inprocess`` trains in this
process against the test session's Ray; ``train_rows(out)`` reads the per-step rows of metrics.jsonl.
"""

from __future__ import annotations

import json
from pathlib import Path

# Metrics that measure time or throughput differ between any two runs; everything else must match.
_VOLATILE_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/")

REWARD_FILE = str(Path(__file__).with_name("shaped_reward.py"))
N_PROMPTS = 16  # 4 prompts per step -> 4 steps per epoch
BATCH = 4


def write_task(data_dir: Path) -> dict[str, str]:
    """16 training and 4 held-out addition problems in the RL row contract."""
    from verl.trainer.demo import addition_rows
    from verl.utils.dataset.rows import write_parquet

    train, test = addition_rows("train")[:N_PROMPTS], addition_rows("test")[:4]
    return {
        "train": str(write_parquet(train, data_dir / "train.parquet")),
        "test": str(write_parquet(test, data_dir / "test.parquet")),
    }


def rl_args(model: str, data: dict, out: Path, steps: int | None, *extra: str, workers: int = 2) -> list[str]:
    n = 2
    return [
        f"data.train_files={data['train']}",
        f"data.val_files={data['test']}",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "data.max_prompt_length=32",
        "data.max_response_length=4",
        f"data.train_batch_size={BATCH}",
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.rollout.n={n}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH // 2}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={BATCH * n // 2 // workers}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={BATCH * n // workers}",
        # warmup + cosine: a scheduler that is not restored changes the LR of the resumed steps
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=2",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
        "actor_rollout_ref.actor.optim.weight_decay=0.01",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0.0",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={workers}",
        "trainer.total_epochs=2",
        *([f"trainer.total_training_steps={steps}"] if steps else []),
        "trainer.test_freq=-1",
        "trainer.save_freq=1",
        "trainer.val_before_train=false",
        "trainer.logger=[jsonl]",
        "trainer.project_name=chaos",
        "trainer.experiment_name=chaos",
        f"trainer.default_local_dir={out}",
        "trainer.resume_mode=auto",
        "trainer.progress_bar=false",
        "trainer.seed=7",
        f"reward.custom_reward_function.path={REWARD_FILE}",
        *extra,
    ]


def run_inprocess(args: list[str], **build_kwargs):
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import run_ppo

    cfg = load_config(args)
    validate_config(cfg)
    return run_ppo(cfg, **build_kwargs)


def metric_rows(out: Path) -> list[dict]:
    path = Path(out) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def train_rows(out: Path) -> dict[int, dict]:
    """step -> that step's training metrics without the timing ones; a step logged twice is an error."""
    rows: dict[int, dict] = {}
    for row in metric_rows(out):
        if "training/global_step" not in row:
            continue
        step = int(row["step"])
        assert step not in rows, f"step {step} logged twice in {out}/metrics.jsonl"
        rows[step] = {k: v for k, v in row.items() if not k.startswith(_VOLATILE_PREFIXES)}
    return rows


def assert_rows_match(expected: dict[int, dict], got: dict[int, dict], steps, rel: float = 0.0) -> None:
    """Every metric of ``steps`` equal (``rel``: relative float tolerance, 0 = bit-exact)."""
    for step in steps:
        a, b = expected[step], got[step]
        assert a.keys() == b.keys(), f"step {step}: keys differ: {sorted(a.keys() ^ b.keys())}"
        for k in a:
            if rel == 0.0:
                assert a[k] == b[k], f"step {step} {k}: uninterrupted {a[k]!r} != resumed {b[k]!r}"
            else:
                assert abs(a[k] - b[k]) <= rel * max(1.0, abs(a[k])), f"step {step} {k}: {a[k]!r} vs {b[k]!r}"
