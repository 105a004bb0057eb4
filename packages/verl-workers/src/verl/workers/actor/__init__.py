"""The PPO actor (upstream ``verl.workers.actor.DataParallelPPOActor``)."""

from verl.workers.actor.dp_actor import DataParallelPPOActor

__all__ = ["DataParallelPPOActor"]
