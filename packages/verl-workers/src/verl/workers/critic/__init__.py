"""The PPO critic (upstream ``verl.workers.critic.DataParallelPPOCritic``)."""

from verl.workers.critic.dp_critic import DataParallelPPOCritic

__all__ = ["DataParallelPPOCritic"]
