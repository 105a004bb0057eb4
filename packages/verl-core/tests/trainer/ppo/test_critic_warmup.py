"""``trainer.critic_warmup``: the actor waits while a critic warms up, and only then (without a critic the key
is accepted only where the config turns the critic off itself, so it must do nothing)."""

import pytest
from verl.protocol import DataProto
from verl.trainer.config import load_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer


class _ActorGroup:
    """The actor's worker group as the stage sees it: counts ``update_actor`` calls, reports no metrics."""

    def __init__(self):
        self.updates = 0

    def update_actor(self, batch):
        self.updates += 1
        return DataProto(meta_info={"metrics": {}})


@pytest.mark.parametrize(
    "estimator, use_critic, step, updates",
    [("grpo", False, 1, 1), ("gae", True, 1, 0), ("gae", True, 2, 1)],
)
def test_the_actor_waits_for_the_critic_warmup_only_with_a_critic(estimator, use_critic, step, updates):
    t = RayPPOTrainer.__new__(RayPPOTrainer)  # no workers: only what the stage reads
    t.config = load_config([f"algorithm.adv_estimator={estimator}", "trainer.critic_warmup=1"])
    t.use_critic, t.global_steps, t.actor_rollout_wg = use_critic, step, _ActorGroup()
    t.stage_update_actor(DataProto(), {})
    assert t.actor_rollout_wg.updates == updates
