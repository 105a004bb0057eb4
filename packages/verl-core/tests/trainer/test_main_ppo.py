"""main_ppo: Ray defaults, role mapping from the registry, and a full run through main(argv) with the
real dataset, reward manager and custom reward file (toy bandit workers and tokenizer)."""

import json
import os

import cloudpickle
import pytest
from verl.trainer import main_ppo
from verl.trainer.config import load_config, validate_config
from verl.trainer.ppo.ray_trainer import Role

from .ppo import bandit_workers as bw

cloudpickle.register_pickle_by_value(bw)
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

REWARD_FILE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return {"score": float(solution_str[:1] == ground_truth), "first": solution_str[:1]}
"""


def _cfg(*overrides):
    cfg = load_config(
        [
            "data.train_files=x.parquet",
            "actor_rollout_ref.model.path=m",
            "trainer.device=cpu",
            "trainer.n_gpus_per_node=2",
            "data.train_batch_size=8",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            *overrides,
        ]
    )
    validate_config(cfg)
    return cfg


def test_ray_init_kwargs_cpu_defaults():
    kw = main_ppo.ray_init_kwargs(_cfg("ray_kwargs.ray_init.num_cpus=3"))
    assert kw["num_cpus"] == 3 and kw["include_dashboard"] is False
    # no thread count forced on every worker: each worker's follows the CPUs it reserves
    assert "OMP_NUM_THREADS" not in kw["runtime_env"]["env_vars"]
    assert kw["runtime_env"]["env_vars"]["TOKENIZERS_PARALLELISM"] == "false"
    assert "num_cpus" not in main_ppo.ray_init_kwargs(_cfg())  # None means: let Ray decide
    mine = main_ppo.ray_init_kwargs(_cfg("+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS=3"))
    assert mine["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] == "3"  # the user's setting is passed on


def test_ray_init_kwargs_worker_niceness(monkeypatch):
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    # workers at nice 0, not Ray's 15 (cpu_threads.worker_niceness_env); no OpenMP wait policy is imposed
    env = main_ppo.ray_init_kwargs(_cfg())["runtime_env"]["env_vars"]
    assert env["RAY_worker_niceness"] == "0" and "OMP_WAIT_POLICY" not in env
    # the user's choice in the Ray runtime env wins ...
    mine = main_ppo.ray_init_kwargs(_cfg("+ray_kwargs.ray_init.runtime_env.env_vars.RAY_worker_niceness=10"))
    assert mine["runtime_env"]["env_vars"]["RAY_worker_niceness"] == "10"
    # ... and so does one in the driver's environment, which Ray's raylet inherits: nothing is set over it
    monkeypatch.setenv("RAY_worker_niceness", "5")
    assert "RAY_worker_niceness" not in main_ppo.ray_init_kwargs(_cfg())["runtime_env"]["env_vars"]


_NICENESS_PROBE = """
import json, sys
import ray
from verl.trainer.config import load_config
from verl.trainer.main_ppo import ray_init_kwargs

kwargs = ray_init_kwargs(load_config([])) if sys.argv[1] == "verl" else {"include_dashboard": False}
ray.init(address="local", num_cpus=1, configure_logging=False, log_to_driver=False, **kwargs)


@ray.remote(num_cpus=0)
def niceness():
    import os

    return os.nice(0)


print(json.dumps(ray.get(niceness.remote())))
"""


@pytest.mark.parametrize("start, expected", [("verl", 0), ("plain", 15)])
def test_workers_started_by_ray_init_kwargs_run_at_nice_0(tmp_path, start, expected):
    """A real Ray cluster: started with main_ppo's settings its workers run at nice 0; started plainly,
    at Ray's 15 (what made our step collapse beside another job)."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"}
    out = subprocess.run(
        [sys.executable, "-c", _NICENESS_PROBE, start], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected


def test_cpus_per_worker_splits_the_cluster():
    assert main_ppo.cpus_per_worker(8.0, 2) == 4.0
    assert main_ppo.cpus_per_worker(8.0, 3) == 2.0  # whole CPUs: 2 threads each, 2 CPUs left over
    assert main_ppo.cpus_per_worker(2.0, 1) == 2.0  # one worker on 2 cores reserves (and runs) 2
    assert main_ppo.cpus_per_worker(2.0, 4) == 0.5  # fewer CPUs than workers: a share each


def test_role_mapping_comes_from_the_registry():
    from verl.registries import WORKER_CLASSES

    actor, critic = WORKER_CLASSES.get("actor_rollout_ref"), WORKER_CLASSES.get("critic")
    assert main_ppo.build_role_worker_mapping(_cfg()) == {Role.ActorRollout: actor}
    gae = main_ppo.build_role_worker_mapping(_cfg("algorithm.adv_estimator=gae", "critic.model.path=m"))
    assert gae == {Role.ActorRollout: actor, Role.Critic: critic}
    kl = main_ppo.build_role_worker_mapping(_cfg("actor_rollout_ref.actor.use_kl_loss=true"))
    assert kl == {Role.ActorRolloutRef: actor}


def test_megatron_strategy_maps_to_the_megatron_worker_classes():
    from verl.registries import WORKER_CLASSES

    meg = ["actor_rollout_ref.actor.strategy=megatron", "algorithm.adv_estimator=gae", "critic.model.path=m"]
    mapping = main_ppo.build_role_worker_mapping(_cfg(*meg))
    assert mapping == {
        Role.ActorRollout: WORKER_CLASSES.get("megatron_actor_rollout_ref"),
        Role.Critic: WORKER_CLASSES.get("megatron_critic"),
    }
    assert WORKER_CLASSES.get("megatron_actor_rollout_ref") is not WORKER_CLASSES.get("actor_rollout_ref")
    # the critic follows its own strategy (an FSDP critic next to a Megatron actor)
    mixed = main_ppo.build_role_worker_mapping(_cfg(*meg, "critic.strategy=fsdp2"))
    assert mixed[Role.Critic] is WORKER_CLASSES.get("critic")


def test_unknown_worker_class_names_the_package(monkeypatch):
    from verl.registries import WORKER_CLASSES

    monkeypatch.setattr(WORKER_CLASSES, "_items", {})
    monkeypatch.setattr("verl.utils.registry._plugins_loaded", True)  # as if verl-workers were not installed
    with pytest.raises(KeyError, match="pip install verl-workers"):
        main_ppo.build_role_worker_mapping(_cfg())


def test_main_end_to_end_with_toy_workers(ray_cluster, tmp_path, monkeypatch, capsys):
    train, val = tmp_path / "train.jsonl", tmp_path / "val.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in bw.bandit_rows(16, seed=1)))
    val.write_text("".join(json.dumps(r) + "\n" for r in bw.bandit_rows(8, seed=2)))
    reward_py = tmp_path / "my_reward.py"
    reward_py.write_text(REWARD_FILE)
    monkeypatch.setattr(main_ppo, "load_tokenizer", lambda config: bw.BanditTokenizer())
    monkeypatch.setattr(
        main_ppo, "build_role_worker_mapping", lambda config: {Role.ActorRollout: bw.BanditActorRolloutRef}
    )
    out = tmp_path / "run"
    argv = [
        f"data.train_files={train}",
        f"data.val_files={val}",
        "actor_rollout_ref.model.path=unused",
        "data.max_prompt_length=4",
        "data.max_response_length=3",
        "data.train_batch_size=8",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.optim.lr=0.2",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
        "trainer.total_epochs=3",
        "trainer.save_freq=3",
        "trainer.test_freq=3",
        "trainer.logger=[console,jsonl,tensorboard]",
        "trainer.progress_bar=true",
        f"trainer.default_local_dir={out}",
        "reward.reward_manager=naive",
        f"reward.custom_reward_function.path={reward_py}",
    ]
    main_ppo.main(argv)
    printed = capsys.readouterr().out
    assert f"training finished: {out}" in printed and "reward_curve.png" in printed
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    train_rows = [r for r in rows if "critic/score/mean" in r]
    assert [r["step"] for r in train_rows] == [1, 2, 3, 4, 5, 6]  # 16 prompts / 8 = 2 steps x 3 epochs
    assert [r["step"] for r in rows if "val/bandit/reward" in r] == [0, 3, 6]
    assert os.listdir(out / "tensorboard") and (out / "reward_curve.png").exists()
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_3", "global_step_6"]
    # The recorded config reloads through --config and equals what ran.
    again = load_config(["--config", str(out / "config.yaml")])
    assert again.trainer.default_local_dir == str(out) and again.reward.custom_reward_function.path == str(
        reward_py
    )

    # Launching the finished run again must fail loudly, not report another success.
    with pytest.raises(SystemExit, match="nothing to train.*step 6"):
        main_ppo.main(argv)


def test_reward_model_on_its_own_pool_or_colocated(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 6.0})
    monkeypatch.setattr(ray, "available_resources", lambda: {"CPU": 6.0})
    rm = ["reward.reward_model.enable=true", "reward.reward_model.model.path=rm"]
    mapping = {Role.ActorRollout: object, Role.RewardModel: object}
    shared = main_ppo.build_resource_pool_manager(_cfg(*rm), mapping)
    assert (
        shared.resource_pool_spec == {"global_pool": [2]}
        and shared.mapping[Role.RewardModel] == "global_pool"
    )
    own = main_ppo.build_resource_pool_manager(
        _cfg(*rm, "reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1",
             "reward.reward_model.n_gpus_per_node=1"), mapping)  # fmt: skip
    assert own.resource_pool_spec == {"global_pool": [2], "reward_pool": [1]}
    assert own.mapping == {Role.ActorRollout: "global_pool", Role.RewardModel: "reward_pool"}
    assert own.num_cpus_per_worker == 2.0  # 6 CPUs over 3 workers: 2 each, run as 2 torch threads each
    with pytest.raises(ValueError, match="enable_resource_pool=true needs nnodes >= 1"):
        _cfg(*rm, "reward.reward_model.enable_resource_pool=true")
