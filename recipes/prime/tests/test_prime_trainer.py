"""RayPRIMETrainer's stages driven through core's ``train_step`` without Ray: the reward, filter and
advantage stages on a scripted generation, with a real in-process PRM worker as the reward-model group
(recorded, so the order of its calls for update=before|after|none is checked), and the worker hooks."""

import os

import numpy as np
import pytest
import torch
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import Role
from verl_recipe_prime.config import load_prime_config
from verl_recipe_prime.prime_core_algos import compute_prime_rloo_advantage, prime_norm
from verl_recipe_prime.prime_ray_trainer import PRM_CHECKPOINT_DIR, RayPRIMETrainer

N = 4  # answers per prompt
# outcome labels of 4 generated groups (the generation round of one step): accuracies 1.0, 0.5, 0.0, 0.25
OUTCOMES = [[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0], [0, 1, 0, 0]]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    from verl.workers.tiny import build_tiny_qwen2

    path = tmp_path_factory.mktemp("trainer_tiny")
    build_tiny_qwen2(path, size="xs", seed=0)
    return str(path)


class Recorder:
    """A worker group stand-in that forwards to a real in-process worker and records the calls."""

    def __init__(self, worker):
        self.worker, self.calls = worker, []

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args))
            return getattr(self.worker, name)(*args, **kwargs)

        return call


def _round() -> DataProto:
    from verl.workers.engine.testing import make_rl_batch

    rows = [a for group in OUTCOMES for a in group]
    data = make_rl_batch(n=len(rows), prompt_len=5, response_len=4, vocab=101, seed=7)
    data.non_tensor_batch["uid"] = np.array([f"g{i // N}" for i in range(len(rows))], dtype=object)
    data.non_tensor_batch["label"] = np.array(rows, dtype=object)
    return data


def _reward_fn(data, return_dict=True):
    """The outcome label on each row's last response token (what a rule reward manager returns)."""
    mask = data.batch["response_mask"]
    last = mask.sum(-1) - 1
    scores = torch.zeros(mask.shape)
    scores[torch.arange(len(data)), last] = torch.tensor([float(v) for v in data.non_tensor_batch["label"]])
    return {"reward_tensor": scores, "reward_extra_info": {}}


def _trainer(model: str, update: str = "before", enable: bool = True) -> RayPRIMETrainer:
    from verl_recipe_prime.prm_worker import PRIMERewardModelWorker

    class Scripted(RayPRIMETrainer):
        def stage_gen(self, batch, metrics):
            return _round()

    t = Scripted.__new__(Scripted)  # no Ray, no data loaders: only what one step needs
    t.config = load_prime_config([
        f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "data.train_batch_size=2", f"actor_rollout_ref.rollout.n={N}", "data.oversample_factor=2",
        "trainer.balance_batch=false", "trainer.device=cpu", "trainer.save_freq=-1", f"reward.reward_model.enable={enable}",
        "reward.reward_model.micro_batch_size_per_gpu=8", "reward.reward_model.mini_batch_size=8",
        f"reward.reward_model.model.update={update}", "reward.reward_model.model.optim.lr=0.01",
    ])  # fmt: skip
    for name in ("stage_old_log_prob", "stage_ref", "stage_values", "stage_update_critic",
                 "stage_update_actor"):  # fmt: skip
        setattr(Scripted, name, lambda self, batch, metrics: batch)
    t.global_steps, t.use_rm, t.use_critic, t.reward_fn = 1, enable, False, _reward_fn
    t.total_training_steps, t.val_reward_fn, t.group_accumulator = 5, None, None
    if enable:
        worker = PRIMERewardModelWorker(t.config.reward.reward_model, total_training_steps=5)
        worker.init_model()
        t.rm_wg = Recorder(worker)
    return t


@pytest.mark.parametrize(
    ("update", "calls"),
    [("before", ["update_rm", "compute_rm_score"]), ("after", ["update_rm"]), ("none", ["compute_rm_score"])],
)
def test_one_step_filters_scores_with_the_prm_and_builds_the_advantage(tiny_model, update, calls):
    t = _trainer(tiny_model, update)
    metrics: dict = {}
    timing: dict = {}
    batch = t.train_step(_prompts(), metrics, timing)
    # the PRM is a stage of its own, right before the advantage, timed on its own
    names = t.pipeline.names
    assert names.index("prm") == names.index("adv") - 1 and timing["prm"] > 0
    # filter: groups g1 (0.5) and g3 (0.25) pass the [0.2, 0.8] band; train_batch_size=2 keeps exactly them
    assert list(dict.fromkeys(batch.non_tensor_batch["uid"])) == ["g1", "g3"]
    assert batch.batch["acc"].tolist() == [1, 0, 1, 0, 0, 1, 0, 0]
    assert metrics["prime/all_acc/mean"] == 7 / 16 and metrics["prime/passed_groups"] == 2.0
    # the PRM saw the filtered batch only, in the configured order
    assert [name for name, _ in t.rm_wg.calls] == calls
    assert all(len(args[0]) == 8 for _, args in t.rm_wg.calls)
    q, mask = batch.batch["prm_log_ratio"], batch.batch["response_mask"]
    if update == "none":
        assert torch.equal(q, torch.zeros_like(q))  # an untrained PRM is its reference
    elif update == "before":
        assert (q * mask).abs().sum() > 0  # scored after this step's update
    # implicit rewards: beta * q on the response tokens, batch-normalised
    torch.testing.assert_close(batch.batch["rm_scores"], prime_norm(0.05 * q * mask, mask, "batch_norm"))
    adv, ret = compute_prime_rloo_advantage(
        mask, batch.non_tensor_batch["uid"], batch.batch["acc"], batch.batch["rm_scores"], 5.0, 5.0
    )
    torch.testing.assert_close(batch.batch["advantages"], adv)
    torch.testing.assert_close(batch.batch["returns"], ret)
    assert "reward_model/dpo_acc" in metrics or update == "after"
    assert ("reward_model/dpo_loss" in metrics) == (update != "none")


def test_without_the_prm_the_advantage_is_outcome_rloo(tiny_model):
    t = _trainer(tiny_model, enable=False)
    batch = t.train_step(_prompts(), {}, {})
    assert "prm" not in t.pipeline
    mask = batch.batch["response_mask"]
    # outcome RLOO by hand on the kept groups: g1 labels [1, 0, 1, 0] -> [+2/3, -2/3, +2/3, -2/3],
    # g3 [0, 1, 0, 0] -> [-1/3, 1, -1/3, -1/3]; x 5, constant along each answer (returns-to-go of one reward)
    per_row = torch.tensor([2, -2, 2, -2, -1, 3, -1, -1]) / 3 * 5
    torch.testing.assert_close(
        batch.batch["returns"], per_row.unsqueeze(-1) * mask.float(), rtol=1e-5, atol=1e-6
    )
    assert "rm_scores" not in batch.batch


def _prompts() -> DataProto:
    return DataProto.from_dict(tensors={"input_ids": torch.zeros(4, 5, dtype=torch.long)})


def test_prm_worker_hooks_extend_core(tmp_path):
    t = RayPRIMETrainer.__new__(RayPRIMETrainer)
    t.total_training_steps, t.use_rm, t.use_critic, t.global_steps = 42, True, False, 3
    roles = {Role.ActorRollout: {"config": "a"}, Role.RewardModel: {"config": "r"}}
    out = t.role_init_kwargs(roles)
    assert out[Role.RewardModel] == {"config": "r", "total_training_steps": 42}
    assert out[Role.ActorRollout] == {"config": "a"} and roles[Role.RewardModel] == {"config": "r"}  # a copy

    class Group:
        def __init__(self):
            self.saved, self.loaded = [], []

        def save_checkpoint(self, path, step, keep):
            self.saved.append((path, step, keep))

        def load_checkpoint(self, path):
            self.loaded.append(path)

    t.actor_rollout_wg, t.rm_wg = Group(), Group()
    t.save_worker_checkpoints(str(tmp_path))
    t.load_worker_checkpoints(str(tmp_path))
    assert t.rm_wg.saved == [(os.path.join(tmp_path, PRM_CHECKPOINT_DIR), 3, None)]
    assert t.actor_rollout_wg.saved == [(os.path.join(tmp_path, "actor"), 3, None)]
    assert t.rm_wg.loaded == [os.path.join(tmp_path, PRM_CHECKPOINT_DIR)]
