"""PPO-family algorithms (``core_algos``) and the Ray driver loop."""
