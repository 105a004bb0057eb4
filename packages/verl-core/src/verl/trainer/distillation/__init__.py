"""On-policy distillation (OPD): the student samples, frozen teachers score its tokens, the student learns
from their log-probabilities (upstream verl's ``verl.trainer.distillation``; docs/distillation.md).

- ``privileged_context``: the teacher's input with privileged context (on-policy self-distillation);
- ``gkd``: GKD's on-policy fraction ``lmbda`` (some rows trained on the dataset's targets instead);
- ``teacher_pool``: the teachers' roles, resource pools, constructor keywords and start;
- ``teacher_step``: the body of the trainer's ``teacher`` stage (rows routed to their teacher).

The per-token divergences (registry ``DISTILLATION_LOSS_REGISTRY``) and how they enter the actor's
objective are loss math, in ``verl.trainer.ppo.distillation_losses`` beside the policy losses. The
trainer runs ``gkd_mix`` and ``teacher`` as named stages of its pipeline (``RayPPOTrainer.build_pipeline``).
"""
