"""main_ppo: Ray defaults, role mapping from the registry, and a full run through main(argv) with the
real dataset, reward manager and custom reward file (toy bandit workers and tokenizer)."""

import json
import os

import cloudpickle
import pytest
from verl.trainer import main_ppo
from verl.trainer.config import load_config, validate_config
from verl.trainer.ppo import run as ppo_run
from verl.trainer.ppo.ray_trainer import Role

from .ppo import bandit_workers as bw

cloudpickle.register_pickle_by_value(bw)

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


class _Actor: ...


class _Critic: ...


class _MegatronActor: ...


class _MegatronCritic: ...


@pytest.fixture
def worker_classes(monkeypatch):
    """verl-workers' names bound to classes of this test (verl-core's tests run without verl-workers): the
    mapping is checked against what the registry holds under each name."""
    from verl.registries import WORKER_CLASSES
    from verl.utils.registry import load_plugins

    load_plugins()  # now, so no plugin registers into the dict that replaces the registry's below
    names = {
        "actor_rollout_ref": _Actor,
        "critic": _Critic,
        "megatron_actor_rollout_ref": _MegatronActor,
        "megatron_critic": _MegatronCritic,
    }
    monkeypatch.setattr(WORKER_CLASSES, "_items", dict(names))
    return WORKER_CLASSES


def test_role_mapping_comes_from_the_registry(worker_classes):
    WORKER_CLASSES = worker_classes
    actor, critic = WORKER_CLASSES.get("actor_rollout_ref"), WORKER_CLASSES.get("critic")
    assert main_ppo.build_role_worker_mapping(_cfg()) == {Role.ActorRollout: actor}
    gae = main_ppo.build_role_worker_mapping(_cfg("algorithm.adv_estimator=gae", "critic.model.path=m"))
    assert gae == {Role.ActorRollout: actor, Role.Critic: critic}
    kl = main_ppo.build_role_worker_mapping(_cfg("actor_rollout_ref.actor.use_kl_loss=true"))
    assert kl == {Role.ActorRolloutRef: actor}


def test_megatron_strategy_maps_to_the_megatron_worker_classes(worker_classes):
    WORKER_CLASSES = worker_classes
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


def _toy_run_files(tmp_path, monkeypatch, reward_file: str, val_rows: int = 0):
    """Bandit rows as jsonl (16 train, ``val_rows`` validation), a reward file, and main_ppo pointed at the
    toy tokenizer and workers. Returns ``(train, val, reward_py)``."""
    train, val = tmp_path / "train.jsonl", tmp_path / "val.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in bw.bandit_rows(16, seed=1)))
    val.write_text("".join(json.dumps(r) + "\n" for r in bw.bandit_rows(val_rows, seed=2)))
    reward_py = tmp_path / "my_reward.py"
    reward_py.write_text(reward_file)
    # main_ppo's command line runs verl.trainer.ppo.run, which looks these up in its own module
    monkeypatch.setattr(ppo_run, "load_tokenizer", lambda config: bw.BanditTokenizer())
    monkeypatch.setattr(ppo_run, "load_processor", lambda config: None)  # the toy model reads text only
    monkeypatch.setattr(
        ppo_run, "build_role_worker_mapping", lambda config: {Role.ActorRollout: bw.BanditActorRolloutRef}
    )
    return train, val, reward_py


def test_main_end_to_end_with_toy_workers(ray_cluster, tmp_path, monkeypatch, capsys):
    train, val, reward_py = _toy_run_files(tmp_path, monkeypatch, REWARD_FILE, val_rows=8)
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


# Scores that make dynamic sampling's counts derivable by hand: prompts whose index is 0 or 1 mod 4 get
# 0, 1, 0, 1 ... in call order (the naive manager scores rows in order and a group's rows are adjacent, so
# each of their groups of 2 is mixed); every other prompt scores 1 every time (an all-equal group).
COUNTING_REWARD_FILE = """
import itertools

_calls = itertools.count()


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    k = next(_calls)
    index = extra_info["index"]
    return {"score": float(k % 2) if index % 4 in (0, 1) else 1.0, "prompt_index": index}
"""


def _dynamic_sampling_argv(tmp_path, monkeypatch, *extra):
    train, _, reward_py = _toy_run_files(tmp_path, monkeypatch, COUNTING_REWARD_FILE)
    return [
        f"data.train_files={train}", "actor_rollout_ref.model.path=unused", "data.shuffle=false",
        "data.max_prompt_length=4", "data.max_response_length=3",
        "data.train_batch_size=3", "data.gen_batch_size=4", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=3", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
        "trainer.device=cpu", "trainer.n_gpus_per_node=2", "trainer.total_training_steps=2",
        "trainer.logger=[jsonl]", "trainer.progress_bar=false", "trainer.val_before_train=false",
        f"trainer.default_local_dir={tmp_path / 'run'}", f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
        "reward.reward_manager=naive", f"reward.custom_reward_function.path={reward_py}",
        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=score", *extra,
    ]  # fmt: skip


def test_main_ppo_runs_dynamic_sampling(ray_cluster, tmp_path, monkeypatch):
    """algorithm.filter_groups is core's: main_ppo drops all-equal groups, generates rounds of
    data.gen_batch_size=4 prompts until data.train_batch_size=3 varied groups are in, trims the rest."""
    main_ppo.main(_dynamic_sampling_argv(tmp_path, monkeypatch))
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    steps = [r for r in rows if "critic/score/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        # per step two rounds of 4 prompts (16 prompts = 4 rounds = the whole data, in order): each round
        # has 2 mixed groups and 2 all-equal ones; 4 kept, 4 dropped; 3 trained
        assert r["train/num_gen_batches"] == 2
        assert (r["dynamic_sampling/kept_groups"], r["dynamic_sampling/dropped_groups"]) == (4, 4)
        # every generated answer: 8 of the mixed groups' rows score 0.5 on average, the other 8 score 1
        assert r["dynamic_sampling/all_score/mean"] == 0.75
        # the trained groups: two mixed (0.5 each) and one more mixed; the all-equal ones never train
        assert r["critic/score/mean"] == 0.5
    trained = {}
    for step in (1, 2):
        records = [json.loads(line) for line in open(tmp_path / "rollouts" / f"{step}.jsonl")]
        trained[step] = sorted({rec["prompt_index"] for rec in records})
        assert len(records) == 6  # 3 groups x rollout.n=2, trimmed from 4 groups
    # arrival order: round 1 keeps prompts 0 and 1, round 2 keeps 4 and 5; the trim drops the last (5)
    assert trained == {1: [0, 1, 4], 2: [8, 9, 12]}


def test_main_ppo_dynamic_sampling_stops_after_max_num_gen_batches(ray_cluster, tmp_path, monkeypatch):
    from verl.trainer.ppo.dynamic_sampling import DynamicSamplingError

    argv = _dynamic_sampling_argv(tmp_path, monkeypatch, "algorithm.filter_groups.max_num_gen_batches=1")
    # one round gives 2 varied groups of the 3 a step needs
    with pytest.raises(DynamicSamplingError, match=r"1 generation batches \(algorithm.filter_groups.max_num_gen_batches=1\) "
                       r"gave 2 groups with a varied 'score', fewer than data.train_batch_size=3 \(2 kept, 2 dropped"):
        main_ppo.main(argv)
