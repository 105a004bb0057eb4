"""Our GRPO step: the real ``RayPPOTrainer`` over a Ray worker group of ``ActorRolloutRefWorker``.

Everything is built the way ``python -m verl.trainer.main_ppo`` builds it (``main_ppo.build_trainer``:
registry-found worker class, FSDP2 engine on CPU, ``hf`` rollout, verl-rewards' ``naive`` reward
manager with the ``arithmetic`` exact-match scorer), and trained by the unmodified ``fit()`` loop.
The only addition is the trainer's tracking hook (``make_logger``): the benchmark's logger records
each step's metrics (``timing_s/<stage>``) and wall time, and calls ``between_steps`` before
returning, which is where the harness times the bare and TRL steps (A, B, C, A, B, C ...).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Under `uv run`, Ray would rebuild the uv environment for every worker (main_ppo avoids it too);
# read when Ray is imported, so it is set before the trainer module pulls Ray in.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402

#: What the performance work changed in this config (issue 9): the native rollout engine (the default
#: engine now) and, one PPO epoch over one mini-batch being exactly on-policy, old log-probs taken from
#: the rollout instead of a second forward pass.
AFTER = (
    "actor_rollout_ref.rollout.name=native",
    "actor_rollout_ref.rollout.calculate_log_probs=true",
    "actor_rollout_ref.actor.use_rollout_log_probs=true",
)


def overrides(
    model_dir: Path,
    new_tokens: int,
    total_steps: int,
    out_dir: Path,
    lr: float = 1e-3,
    variant: str = "after",
    after_overrides: Sequence[str] = (),
) -> list[str]:
    """The config of the anchor's settings as ``key=value`` overrides of the trainer defaults.

    ``variant="before"``: the config the trainer had before the performance work (``hf`` rollout,
    an old-log-prob forward). ``variant="after"``: the same with :data:`AFTER` (the ``native`` rollout,
    whose log-probs are the old log-probs), then ``after_overrides`` (``key=value``) replacing or
    adding keys.
    """
    if variant not in ("before", "after"):
        raise ValueError(f"overrides(variant={variant!r}): expected 'before' or 'after'")
    base = _base_overrides(model_dir, new_tokens, total_steps, out_dir, lr)
    if variant == "before":
        # the old trainer's config spelled the rollout dtype out; today's refuses the key for the
        # native/hf engines, which run the actor's weights in the actor's compute dtype
        return [*base, "actor_rollout_ref.rollout.dtype=float32"]
    merged = {item.split("=", 1)[0]: item for item in base}
    for item in (*AFTER, *after_overrides):
        if "=" not in item:
            raise ValueError(f"after override {item!r}: expected key=value")
        merged[item.split("=", 1)[0]] = item
    return list(merged.values())


def _base_overrides(
    model_dir: Path, new_tokens: int, total_steps: int, out_dir: Path, lr: float
) -> list[str]:
    """The settings both variants share (the config as of commit 06aa171, before the perf work)."""
    return [
        f"data.train_files={model_dir / 'train.parquet'}",
        "data.train_batch_size=8",  # prompts per step
        "data.max_prompt_length=4",  # "a+b=" is 4 tokens: no prompt padding
        f"data.max_response_length={new_tokens}",
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.ignore_eos=true",  # fixed lengths, as in the bare and TRL steps
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",  # one optimizer step per generation
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",  # no gradient accumulation
        "actor_rollout_ref.actor.ppo_epochs=1",
        f"actor_rollout_ref.actor.optim.lr={lr}",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
        "actor_rollout_ref.actor.grad_clip=1.0",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0.0",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        "reward.reward_manager=naive",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        f"trainer.total_training_steps={total_steps}",
        "trainer.logger=[console]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.progress_bar=false",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={out_dir}",
    ]


class StepRecorder:
    """A tracking backend (``log``/``finish``) that keeps every step's metrics and wall time.

    ``wall_s`` of a step runs from the end of the previous ``log`` call (or from the recorder's
    creation, at the start of ``fit``) to this call: fetching the batch, the step, its metrics.
    ``cpu_s`` is the CPU time ``cpu_clock`` (cumulative seconds) advanced over the same interval.
    """

    def __init__(self, between_steps: Callable[[int], None], cpu_clock: Callable[[], float]):
        self.between_steps = between_steps
        self.cpu_clock = cpu_clock
        self.records: list[dict[str, Any]] = []
        self._t, self._c = time.perf_counter(), cpu_clock()

    def log(self, data: dict, step: int) -> None:
        wall, cpu = time.perf_counter() - self._t, self.cpu_clock() - self._c
        self.records.append(
            {
                "step": step,
                "wall_s": wall,
                "cpu_s": cpu,
                **{k: v for k, v in data.items() if isinstance(v, int | float)},
            }
        )
        self.between_steps(step)
        self._t, self._c = time.perf_counter(), self.cpu_clock()

    def finish(self) -> None:
        pass


class BenchTrainer(RayPPOTrainer):
    """``RayPPOTrainer`` whose tracking is the benchmark's :class:`StepRecorder`."""

    between_steps: Callable[[int], None] = staticmethod(lambda step: None)
    cpu_clock: Callable[[], float] = staticmethod(time.process_time)

    def make_logger(self) -> StepRecorder:
        self.recorder = StepRecorder(self.between_steps, self.cpu_clock)
        return self.recorder


def start_ray(worker_threads: int, extra_env: dict[str, str] | None = None) -> None:
    """A local Ray cluster whose workers use ``worker_threads`` torch threads (via OMP_NUM_THREADS).

    ``extra_env`` goes to every worker too (the before-variant passes its ``PYTHONPATH`` so the
    workers import the old sources).
    """
    import ray

    try:
        from verl.utils.cpu_threads import worker_niceness_env
    except ImportError:  # an older verl: Ray's own worker niceness

        def worker_niceness_env() -> dict[str, str]:
            return {}

    # the workers' niceness as production sets it (main_ppo.ray_init_kwargs); their OpenMP wait policy
    # is this process's environment's (``--omp-wait-policy``), which the workers inherit
    env = {
        "OMP_NUM_THREADS": str(worker_threads),
        "TOKENIZERS_PARALLELISM": "false",
        **worker_niceness_env(),
        **(extra_env or {}),
    }
    # address="local": always a fresh cluster of our own, never one another process started.
    ray.init(
        address="local",
        num_cpus=max(2, worker_threads),
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
        runtime_env={"env_vars": env},
    )


def build(
    model_dir: Path,
    new_tokens: int,
    total_steps: int,
    out_dir: Path,
    variant: str = "after",
    after_overrides: Sequence[str] = (),
) -> BenchTrainer:
    """Config, trainer and initialised workers for one benchmark cell (Ray must be running)."""
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import build_trainer

    cfg = load_config(
        overrides(
            model_dir, new_tokens, total_steps, out_dir, variant=variant, after_overrides=after_overrides
        )
    )
    validate_config(cfg)
    trainer = build_trainer(cfg, trainer_cls=BenchTrainer)
    trainer.init_workers()
    return trainer


def cpu_clock_of(pids: list[int]) -> Callable[[], float]:
    """Cumulative CPU seconds (user + system, all threads) of this process plus the processes ``pids``."""
    import psutil

    procs = [psutil.Process(pid) for pid in pids]

    def clock() -> float:
        return time.process_time() + sum(sum(p.cpu_times()[:2]) for p in procs)

    return clock


def worker_info(trainer: RayPPOTrainer) -> list[dict[str, Any]]:
    """PID, torch thread count, ``verl.workers`` source file, torch build, compute dtype and compile
    decision of every actor worker process."""
    import machine
    import ray

    ray.cloudpickle.register_pickle_by_value(machine)  # the workers do not have this folder on sys.path

    def probe(_self: Any, torch_build=machine.torch_build) -> dict[str, Any]:
        import os as _os

        import torch as _torch
        import verl.workers as _workers

        # the actor role's engine, in a colocated (fused) worker or the worker itself; getattr: the
        # before-variant's old workers may lack these attributes
        roles = getattr(_self, "fused_worker_dict", None) or {"worker": _self}
        engines = [getattr(w, "actor_engine", None) for w in roles.values()]
        engine = next((e for e in engines if e is not None), None)
        return {
            "pid": _os.getpid(),
            "threads": _torch.get_num_threads(),
            "verl_workers_file": _workers.__file__,
            "torch_build": torch_build(),
            "compute_dtype": str(engine.precision.param_dtype)[6:] if engine is not None else None,
            "compile": getattr(engine, "compile_reason", None),
        }

    return ray.get([w.__ray_call__.remote(probe) for w in trainer.actor_rollout_wg.workers])
