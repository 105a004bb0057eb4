"""Issue 4's integration test: RayPPOTrainer with verl-workers' roles trains on CPU.

GRPO (actor + rollout + reference via the KL loss) goes through ``main_ppo.run_ppo``, the user's
path, which maps roles to worker classes found in ``verl.registries.WORKER_CLASSES``; PPO (GAE with a
critic) builds ``RayPPOTrainer`` directly. Each runs a few steps on the built-in arithmetic task with
the tiny Qwen2 (GRPO on the default ``native`` rollout, PPO on ``hf``); every reported metric must be finite.
"""

import math

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _arithmetic_files(tmp_path):
    from verl.utils.dataset import write_parquet
    from verl.utils.dataset.tasks import make_arithmetic_rows

    train = write_parquet(
        make_arithmetic_rows(8, seed=0, digits=1, split="train"), tmp_path / "train.parquet"
    )
    test = write_parquet(make_arithmetic_rows(4, seed=0, digits=1, split="test"), tmp_path / "test.parquet")
    return str(train), str(test)


def _config(tmp_path, model_path, *overrides):
    from verl.trainer.config import load_config, validate_config

    train, test = _arithmetic_files(tmp_path)
    cfg = load_config(
        [
            f"data.train_files={train}",
            f"data.val_files={test}",
            "data.train_batch_size=2",
            "data.max_prompt_length=32",
            "data.max_response_length=4",
            f"actor_rollout_ref.model.path={model_path}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "critic.model.enable_gradient_checkpointing=false",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.optim.lr=0.001",
            "critic.ppo_micro_batch_size_per_gpu=2",
            "trainer.device=cpu",
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=1",
            "trainer.total_training_steps=2",
            "trainer.logger=[console]",
            "trainer.val_before_train=false",
            "trainer.test_freq=2",
            "trainer.save_freq=-1",
            "trainer.progress_bar=false",
            f"trainer.default_local_dir={tmp_path / 'out'}",
            *overrides,
        ]
    )
    validate_config(cfg)
    return cfg


def _assert_finite(metrics):
    assert metrics, "fit() returned no metrics"
    bad = {k: v for k, v in metrics.items() if isinstance(v, int | float) and not math.isfinite(v)}
    assert not bad, f"non-finite metrics: {bad}"


def test_grpo_steps_through_main_ppo(ray_cluster, tmp_path, tiny_model_dir):
    from verl.trainer.main_ppo import run_ppo

    # the default (native) rollout, whose own log-probs stand in for the old-log-prob pass
    cfg = _config(
        tmp_path, tiny_model_dir, "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.actor.use_rollout_log_probs=true",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",  # the reference runs for the KL loss
    )
    metrics = run_ppo(cfg)
    _assert_finite(metrics)
    assert metrics["training/global_step"] == 2
    assert "actor/pg_loss" in metrics and "actor/kl_loss" in metrics
    assert "actor/entropy" in metrics  # reported by the update, as no old-log-prob pass ran


def test_ppo_gae_with_critic_on_cpu(ray_cluster, tmp_path, tiny_model_dir):
    from verl.registries import REWARD_MANAGERS, WORKER_CLASSES
    from verl.single_controller.ray import ResourcePoolManager
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, Role
    from verl.utils.dataset import collate_fn, create_rl_dataset
    from verl.workers.tokenizer import hf_tokenizer

    cfg = _config(
        tmp_path, tiny_model_dir, "algorithm.adv_estimator=gae", "algorithm.lam=0.95", "actor_rollout_ref.rollout.name=hf"
    )
    tokenizer = hf_tokenizer(tiny_model_dir)
    mapping = {
        Role.ActorRollout: WORKER_CLASSES.get("actor_rollout_ref"),
        Role.Critic: WORKER_CLASSES.get("critic"),
    }
    pools = ResourcePoolManager(
        resource_pool_spec={"global_pool": [1]},
        mapping={role: "global_pool" for role in mapping},
        use_gpu=False,
        num_cpus_per_worker=0.5,
    )
    reward = REWARD_MANAGERS.get("naive")
    trainer = RayPPOTrainer(
        config=cfg,
        tokenizer=tokenizer,
        role_worker_mapping=mapping,
        resource_pool_manager=pools,
        reward_fn=reward(tokenizer=tokenizer, num_examine=0),
        val_reward_fn=reward(tokenizer=tokenizer, num_examine=0),
        train_dataset=create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer),
        val_dataset=create_rl_dataset(cfg.data.val_files, cfg.data, tokenizer, is_train=False),
        collate_fn=collate_fn,
    )
    trainer.init_workers()
    metrics = trainer.fit()
    _assert_finite(metrics)
    assert metrics["training/global_step"] == 2
    assert "critic/vf_loss" in metrics and "actor/pg_loss" in metrics


@pytest.fixture
def in_process_worker_env():
    """The local backend makes this pytest process a rank-0 worker (rendezvous env, gloo group): undo it."""
    from verl.single_controller.local import restored_process_env

    with restored_process_env():
        yield


def test_local_backend_runs_the_worker_in_this_process(ray_cluster, in_process_worker_env, tmp_path, tiny_model_dir):
    """trainer.worker_backend=local: the same worker class in the driver's process, no Ray worker; its
    greedy validation equals the Ray backend's (same weights), and GRPO trains through it."""
    from verl.trainer.main_ppo import build_trainer, run_ppo
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    val_only = ("trainer.val_before_train=true", "trainer.val_only=true", "algorithm.adv_estimator=grpo")
    on_ray = run_ppo(_config(tmp_path / "ray", tiny_model_dir, *val_only))
    cfg = _config(tmp_path / "local", tiny_model_dir, *val_only, "trainer.worker_backend=local")
    trainer = build_trainer(cfg)
    trainer.init_workers()
    assert type(trainer.actor_rollout_wg.worker) is ActorRolloutRefWorker  # an object here, not an actor
    in_process = trainer.fit()
    val_keys = [k for k in on_ray if k.startswith("val/")]
    assert val_keys and {k: in_process[k] for k in val_keys} == {k: on_ray[k] for k in val_keys}

    cfg = _config(tmp_path / "train", tiny_model_dir, "algorithm.adv_estimator=grpo", "trainer.worker_backend=local",
                  "actor_rollout_ref.rollout.calculate_log_probs=true",
                  "actor_rollout_ref.actor.use_rollout_log_probs=true")
    metrics = run_ppo(cfg)
    _assert_finite(metrics)
    assert metrics["training/global_step"] == 2 and "actor/pg_loss" in metrics
