"""What a run shows and leaves behind besides checkpoints: the tracker, the progress bar, the rollout dump.

``ProgressMixin`` is mixed into ``RayPPOTrainer``.
"""

from __future__ import annotations

from verl.protocol import DataProto
from verl.trainer.ppo.dumps import rollout_records, write_generations
from verl.utils.tracking import Tracking

__all__ = ["ProgressMixin"]


class ProgressMixin:
    """Tracking and progress for ``RayPPOTrainer`` (expects its attributes)."""

    @property
    def output_dir(self) -> str:
        """Where metrics, plots and checkpoints of this run go (``trainer.default_local_dir``)."""
        return self.config.trainer.default_local_dir

    def make_logger(self) -> Tracking:
        t = self.config.trainer
        return Tracking(
            project_name=t.project_name, experiment_name=t.experiment_name, default_backend=list(t.logger),
            config=self.config, output_dir=self.output_dir,
            # rows a killed run logged past its checkpoint are dropped: they are trained and logged again
            resume_step=self.global_steps if self._resumed_from is not None else None,
        )

    def progress_bar(self, initial: int, total: int):
        if not self.config.trainer.progress_bar:
            return None
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc="Training", unit="step", dynamic_ncols=True)

    def advance_progress(self, bar, metrics: dict) -> None:
        if bar is None:
            return
        postfix = {"reward": f"{metrics.get('critic/score/mean', float('nan')):.3f}"}
        for k, v in metrics.items():
            if k.startswith("val/") and k.endswith("/reward"):
                postfix[k.removeprefix("val/")] = f"{v:.3f}"
        bar.set_postfix(postfix, refresh=False)
        bar.update(1)

    def dump_rollout_data(self, batch: DataProto) -> str:
        """``trainer.rollout_data_dir/{step}.jsonl``: every trained trajectory (see ``ppo.dumps``)."""
        records = rollout_records(batch, self.tokenizer, self.global_steps)
        return write_generations(self.config.trainer.rollout_data_dir, self.global_steps, records)
