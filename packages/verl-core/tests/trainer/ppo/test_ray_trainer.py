"""The PPO loop end to end with toy CPU workers: GRPO and PPO+GAE make a bandit's reward rise."""

import json
import os

import cloudpickle
import pytest
from verl.trainer.config import load_config, validate_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, ResourcePoolManager, Role

from . import bandit_workers as bw

cloudpickle.register_pickle_by_value(bw)


class BanditTrainer(RayPPOTrainer):
    """The trainer as is; subclassed so tests can add recording hooks."""


def bandit_config(tmp_path, *overrides):
    cfg = load_config([
        "data.train_files=unused.parquet", "actor_rollout_ref.model.path=unused",
        "data.train_batch_size=8", "data.max_prompt_length=3", "data.max_response_length=3",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        # the estimator is named, so the critic's settings stay for the tests that turn on GAE
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.optim.lr=0.2", "critic.optim.lr=0.2",
        "critic.model.path=unused",
        "critic.ppo_micro_batch_size_per_gpu=4",
        "trainer.device=cpu", "trainer.nnodes=1", "trainer.n_gpus_per_node=2",
        "trainer.logger=[console,jsonl]", "trainer.project_name=bandit", "trainer.progress_bar=false",
        f"trainer.default_local_dir={tmp_path}", "trainer.val_before_train=true", "trainer.test_freq=5",
        *overrides,
    ])
    validate_config(cfg)
    return cfg


def make_trainer(cfg, n_train=32, n_val=12, critic=False, trainer_cls=BanditTrainer, reward_fn=bw.bandit_reward_fn):
    mapping = {Role.ActorRollout: bw.BanditActorRolloutRef, Role.RefPolicy: bw.BanditActorRolloutRef}
    pools = {Role.ActorRollout: "global_pool", Role.RefPolicy: "global_pool"}
    if critic:
        mapping[Role.Critic] = bw.BanditCritic
        pools[Role.Critic] = "global_pool"
    rpm = ResourcePoolManager({"global_pool": [cfg.trainer.n_gpus_per_node]}, pools, use_gpu=False,
                              num_cpus_per_worker=0.1)
    trainer = trainer_cls(cfg, tokenizer=None, role_worker_mapping=mapping, resource_pool_manager=rpm,
                          reward_fn=reward_fn, val_reward_fn=bw.bandit_reward_fn,
                          train_dataset=bw.make_prompts(n_train, seed=1), val_dataset=bw.make_prompts(n_val, seed=2),
                          collate_fn=bw.collate_rows)
    trainer.init_workers()
    return trainer


def read_jsonl(path):
    return [json.loads(line) for line in open(path)]


def _assert_rises(rows, total):
    train = [r for r in rows if "critic/score/mean" in r]
    assert [r["step"] for r in train] == list(range(1, total + 1))
    first = sum(r["critic/score/mean"] for r in train[:3]) / 3
    last = sum(r["critic/score/mean"] for r in train[-3:]) / 3
    # Chance is 1/6 for the first token; a learning policy gets most prompts right.
    assert first < 0.5 and last > 0.8, (first, last)
    val = [r for r in rows if "val/bandit/reward" in r]
    assert val[0]["step"] == 0 and val[-1]["step"] == total
    assert val[-1]["val/bandit/reward"] > val[0]["val/bandit/reward"] + 0.4
    return train


def test_grpo_reward_rises(ray_cluster, tmp_path):
    cfg = bandit_config(tmp_path, "algorithm.adv_estimator=grpo", "trainer.total_epochs=5",
                        "trainer.experiment_name=grpo")
    trainer = make_trainer(cfg)
    last = trainer.fit()
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    train = _assert_rises(rows, 20)
    assert last["training/global_step"] == 20
    # 32 prompts / 8 per step = 4 steps per epoch, 5 epochs; the workers got that count at construction.
    assert trainer.total_training_steps == 20
    assert trainer.actor_rollout_wg.get_info()[0]["total_training_steps"] == 20
    assert trainer.actor_rollout_wg.get_info()[0]["updates"] == 20
    # every worker gets the resolved device and trainer.seed (it adds its rank itself)
    assert {(i["device"], i["seed"]) for i in trainer.actor_rollout_wg.get_info()} == {("cpu", 1)}
    for key in ("critic/advantages/mean", "response_length/mean", "prompt_length/mean", "actor/entropy",
                "actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl", "timing_s/gen",
                "timing_s/update_actor", "perf/throughput", "reward_extra/acc/mean"):
        assert key in train[-1], key
    # GRPO advantages are centred per group: their batch mean is ~0.
    assert abs(train[-1]["critic/advantages/mean"]) < 0.2
    assert (tmp_path / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"


def test_ppo_gae_reward_rises(ray_cluster, tmp_path):
    cfg = bandit_config(tmp_path, "algorithm.adv_estimator=gae", "trainer.total_epochs=5",
                        "trainer.experiment_name=gae", "actor_rollout_ref.actor.use_kl_loss=true",
                        "actor_rollout_ref.actor.kl_loss_coef=0.001")
    trainer = make_trainer(cfg, critic=True)
    trainer.fit()
    train = _assert_rises(read_jsonl(tmp_path / "metrics.jsonl"), 20)
    for key in ("critic/vf_loss", "critic/values/mean", "critic/returns/mean", "critic/vf_explained_var",
                "actor/kl_loss"):
        assert key in train[-1], key
    # The critic learns that returns grew: its mean value estimate follows the score upward.
    assert train[0]["critic/values/mean"] < 0.2 and train[-1]["critic/values/mean"] > 0.5


class OverlapProbe(BanditTrainer):
    """Opens ``log_prob_started`` when the old-log-prob stage begins (on the driver's main thread)."""

    def stage_old_log_prob(self, batch, metrics):
        self.log_prob_started.set()
        return super().stage_old_log_prob(batch, metrics)


def test_async_reward_overlaps_the_log_prob_passes(ray_cluster, tmp_path):
    import threading

    started = threading.Event()
    threads = set()

    def waiting_reward(data, return_dict=False):
        # Scoring can only finish once the log-prob stage has begun: with the reward stage run before
        # it (launch_reward_fn_async=false) this wait would time out and fail the step.
        threads.add(threading.current_thread().name)
        if not started.wait(timeout=60):
            raise TimeoutError("the old-log-prob stage did not start while the reward was being computed")
        started.clear()
        return bw.bandit_reward_fn(data, return_dict=return_dict)

    cfg = bandit_config(tmp_path, "algorithm.adv_estimator=grpo", "trainer.total_epochs=3",
                        "trainer.experiment_name=async", "reward.launch_reward_fn_async=true",
                        "trainer.val_before_train=false", "trainer.test_freq=-1")
    trainer = make_trainer(cfg, trainer_cls=OverlapProbe)
    trainer.log_prob_started = started
    trainer.reward_fn = waiting_reward
    trainer.fit()
    assert threads and all(name.startswith("reward") for name in threads)  # scored off the main thread
    rows = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "critic/score/mean" in r]
    assert len(rows) == 12 and all("timing_s/reward_wait" in r and "reward_extra/acc/mean" in r for r in rows)
    assert sum(r["critic/score/mean"] for r in rows[-3:]) / 3 > 0.6  # the scores reached the advantages

    def broken_reward(data, return_dict=False):
        raise ValueError("reward function failed on purpose")

    cfg = bandit_config(tmp_path / "broken", "algorithm.adv_estimator=grpo", "trainer.total_training_steps=1",
                        "reward.launch_reward_fn_async=true", "trainer.val_before_train=false")
    trainer = make_trainer(cfg)
    trainer.reward_fn = broken_reward
    with pytest.raises(ValueError, match="failed on purpose"):
        trainer.fit()


class BanditTokenizer:
    """Text for the bandit's toy vocabulary: token i is letter i ("a" = pad, which the bandit also samples
    as a response token); EOS is the special token."""

    pad_token_id, eos_token_id = bw.PAD, bw.EOS

    def decode(self, ids, skip_special_tokens=False):
        return "".join("" if i == bw.EOS and skip_special_tokens else "abcdefgh"[i] for i in ids)


def test_rollout_and_validation_dumps_and_generation_table(ray_cluster, tmp_path, capsys):
    """trainer.rollout_data_dir / validation_data_dir: {step}.jsonl per step with upstream's keys, the
    score being the reward function's (here the extra key acc equals it); log_val_generations=3: the
    same 3 prompts at every validation, as a table on the console and rows in val_generations.jsonl."""
    cfg = bandit_config(tmp_path, "algorithm.adv_estimator=grpo", "trainer.total_epochs=1",
                        "trainer.experiment_name=dumps", "trainer.test_freq=2", "trainer.log_val_generations=3",
                        f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
                        f"trainer.validation_data_dir={tmp_path / 'val'}")
    trainer = make_trainer(cfg)
    trainer.tokenizer = BanditTokenizer()
    trainer.fit()
    assert sorted(os.listdir(tmp_path / "rollouts")) == ["1.jsonl", "2.jsonl", "3.jsonl", "4.jsonl"]
    rows = read_jsonl(tmp_path / "rollouts" / "3.jsonl")
    assert len(rows) == 8 * 4  # prompts x rollout.n
    assert {tuple(sorted(r)) for r in rows} == {("acc", "gts", "input", "output", "score", "step")}
    assert all(r["step"] == 3 and r["gts"] is None and r["score"] == r["acc"] for r in rows)
    for r in rows:  # the texts are the prompt and the response: the score follows from them
        first = r["output"][:1]
        want = "abcdefgh"[bw.target("abcdefgh".index(r["input"][-1]))]
        assert r["score"] == float(first == want), r
    assert sorted(os.listdir(tmp_path / "val")) == ["0.jsonl", "2.jsonl", "4.jsonl"]
    val = read_jsonl(tmp_path / "val" / "4.jsonl")
    assert len(val) == 12 and all(r["step"] == 4 for r in val)
    metrics = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "val/bandit/reward" in r]
    assert metrics[-1]["val/bandit/reward"] == pytest.approx(sum(r["score"] for r in val) / 12)
    table = read_jsonl(tmp_path / "val_generations.jsonl")
    assert [r["step"] for r in table] == [0] * 3 + [2] * 3 + [4] * 3
    assert [r["input"] for r in table[:3]] == [r["input"] for r in table[6:]]
    assert "validation generations (step 4):" in capsys.readouterr().out
