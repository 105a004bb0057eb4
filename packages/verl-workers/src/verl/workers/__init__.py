"""verl-workers: training engines (FSDP2/FSDP), actor/critic algorithms, checkpoints, rollout, roles.

Importing ``verl.workers`` is cheap; submodules load torch/transformers when used.
"""
