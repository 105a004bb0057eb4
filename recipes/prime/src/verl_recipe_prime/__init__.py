"""PRIME (Process Reinforcement through Implicit Rewards, arXiv 2502.01456) as a verl recipe.

    uv run --package verl-recipe-prime verl-prime                  # CPU default: tiny model, multi-step sums
    uv run --package verl-recipe-prime verl-prime --config recipes/prime/configs/prime_eurus2_7b_sft.yaml ...

`RayPRIMETrainer` is core's PPO trainer with PRIME's reward, filter and advantage stages; the implicit PRM
is `PRIMERewardModelWorker` (``WORKER_CLASSES["prime_reward_model"]``); the formulas are in
`verl_recipe_prime.prime_core_algos`. See README.md.
"""
