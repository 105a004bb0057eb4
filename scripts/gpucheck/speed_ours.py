"""Our GRPO step for a speed cell: the real ``RayPPOTrainer.fit`` with ``trainer.worker_backend=local``.

Built as ``main_ppo.build_trainer`` builds it (FSDP2 engine, ``native`` rollout, the ``naive`` reward
manager), with ``benchmarks/grpo_step/ours.py``'s ``BenchTrainer``, whose tracking hook records each
step's metrics (``timing_s/<stage>``) and wall time. Settings: ``speed_common``.

    python speed_ours.py --cell JSON --json OUT --deadline T
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "benchmarks" / "grpo_step"))

from context import peak_memory_gib, reset_peak_memory  # noqa: E402
from speed_common import LR, PROMPTS, SAMPLES, WEIGHT_DECAY, Cell, Results, parse, run_lengths  # noqa: E402

STAGES = ("gen", "reward", "old_log_prob", "adv", "update_actor", "step")


def overrides(cell: Cell, length: int, steps: int, out: Path) -> list[str]:
    micro = cell.micro_rows[length]
    arr = "actor_rollout_ref"
    return [
        f"data.train_files={cell.data_file}", f"data.train_batch_size={PROMPTS}",
        f"data.max_prompt_length={cell.prompt_len}", f"data.max_response_length={length}",
        f"{arr}.model.path={cell.model_dir}", f"{arr}.model.model_dtype={cell.dtype}",
        f"{arr}.model.enable_gradient_checkpointing=false",
        f"{arr}.rollout.name=native", f"{arr}.rollout.n={SAMPLES}", f"{arr}.rollout.temperature=1.0",
        f"{arr}.rollout.ignore_eos=true", f"{arr}.rollout.calculate_log_probs=true",
        f"{arr}.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        f"{arr}.actor.use_rollout_log_probs=true", f"{arr}.actor.strategy=fsdp2",
        f"{arr}.actor.ppo_mini_batch_size={PROMPTS}", f"{arr}.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"{arr}.actor.ppo_epochs=1", f"{arr}.actor.optim.lr={LR}", f"{arr}.actor.optim.lr_scheduler_type=constant",
        f"{arr}.actor.optim.weight_decay={WEIGHT_DECAY}", f"{arr}.actor.grad_clip=1.0",
        f"{arr}.actor.use_kl_loss=false", f"{arr}.actor.entropy_coeff=0.0",
        "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=false", "reward.reward_manager=naive",
        f"trainer.device={cell.device}", "trainer.worker_backend=local", "trainer.nnodes=1", "trainer.n_gpus_per_node=1",
        f"trainer.total_training_steps={steps}", "trainer.logger=[console]", "trainer.val_before_train=false",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.progress_bar=false", "trainer.resume_mode=disable",
        f"trainer.default_local_dir={out}",
    ]


def run_length(cell: Cell, length: int, steps: int, work: Path) -> dict:
    from ours import BenchTrainer
    from verl.single_controller.local import restored_process_env
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import build_trainer

    reset_peak_memory(cell.device)
    t0 = time.perf_counter()
    with restored_process_env():
        cfg = load_config(overrides(cell, length, steps, work / f"ours_{cell.shape}_{length}"))
        validate_config(cfg)
        trainer = build_trainer(cfg, trainer_cls=BenchTrainer)
        trainer.init_workers()
        setup = time.perf_counter() - t0
        trainer.fit()
        records = trainer.recorder.records
        del trainer
        gc.collect()
    memory = peak_memory_gib(cell.device)
    out_steps = []
    for r in records:
        entry = {"step_s": r["wall_s"], "response_tokens": r.get("response_length/mean", 0) * cell.rows}
        entry.update({f"{s}_s": r[f"timing_s/{s}"] for s in STAGES if f"timing_s/{s}" in r})
        out_steps.append(entry)
    return {"length": length, "micro_rows": cell.micro_rows[length], "setup_s": round(setup, 2),
            "steps": out_steps, **memory}


def main() -> None:
    cell, out, deadline = parse(__doc__)
    run_lengths(cell, deadline, Results(out, cell, "ours"), lambda length, steps: run_length(cell, length, steps, out.parent))


if __name__ == "__main__":
    main()
