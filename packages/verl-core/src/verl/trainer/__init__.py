"""The PPO-family trainer: algorithms (``ppo.core_algos``), config, datasets and the driver loop."""
