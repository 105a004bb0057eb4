"""On-policy distillation (OPD): the student samples, frozen teachers score its tokens, the student learns
from their log-probabilities (upstream verl's ``verl.trainer.distillation``; docs/distillation.md).

- ``losses``: the per-token divergences (registry ``DISTILLATION_LOSS_REGISTRY``) and how they enter the
  actor's objective (supervised, or as a dense reward through a policy loss);
- ``privileged_context``: the teacher's input with privileged context (on-policy self-distillation);
- ``gkd``: GKD's on-policy fraction ``lmbda`` (some rows trained on the dataset's targets instead);
- ``teacher_pool``: the teachers' roles, resource pools and the trainer's teacher step.
"""
