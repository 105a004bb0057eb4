"""The trainer's prompt data: the resumable train loader, the validation loader, the step count.

``TrainerDataMixin`` is mixed into ``RayPPOTrainer``. ``create_dataloader`` is a hook (a recipe whose
step count is decided elsewhere overrides it and calls it first).
"""

from __future__ import annotations

from typing import Any

__all__ = ["TrainerDataMixin"]


class TrainerDataMixin:
    """Data loading for ``RayPPOTrainer`` (expects its ``config``)."""

    def build_loader(self, dataset: Any, batch_size: int, shuffle: bool, seed: int, collate_fn: Any,
                     drop_last: bool, sampler: Any = None) -> Any:
        """A resumable loader (``state_dict``/``load_state_dict``, ``len`` = batches per epoch)."""
        from verl.utils.dataset import create_rl_dataloader  # the dataset helper's stateful loader

        return create_rl_dataloader(dataset, batch_size=batch_size, shuffle=shuffle, seed=seed,
                                    collate_fn=collate_fn, drop_last=drop_last, sampler=sampler,
                                    num_workers=int(self.config.data.dataloader_num_workers))

    def create_dataloader(self, train_dataset: Any, val_dataset: Any, collate_fn: Any, train_sampler: Any) -> None:
        """Build the resumable train loader and the val loader; compute the total step count once."""
        cfg = self.config
        if train_dataset is None:
            raise ValueError("RayPPOTrainer needs train_dataset (main_ppo builds it from data.train_files)")
        self.train_dataloader = self.build_loader(
            train_dataset, cfg.data.gen_batch_size, cfg.data.shuffle, cfg.data.seed, collate_fn, True, train_sampler
        )
        self.val_dataloader = None
        if val_dataset is not None:
            val_bs = cfg.data.val_batch_size or len(val_dataset)
            self.val_dataloader = self.build_loader(
                val_dataset, val_bs, cfg.data.validation_shuffle, cfg.data.seed, collate_fn, False
            )
        steps_per_epoch = len(self.train_dataloader)
        if steps_per_epoch == 0:
            raise ValueError(
                f"the training set has {len(train_dataset)} prompts, fewer than one batch of "
                f"data.gen_batch_size={cfg.data.gen_batch_size}; lower the batch size or add data"
            )
        total = steps_per_epoch * int(cfg.trainer.total_epochs)
        if cfg.trainer.total_training_steps is not None and int(cfg.trainer.total_training_steps) > 0:
            total = int(cfg.trainer.total_training_steps)
        # Computed once, passed to the workers as a constructor keyword; the config is never written.
        self.total_training_steps = total
        self.epoch = 0
        self._batches_consumed = 0
        self._train_iter = None
        self._resumed_from: str | None = None  # the checkpoint dir fit() resumed from

    def next_batch(self) -> dict:
        """The next prompt batch; a new pass over the data starts when one runs out.

        ``self.epoch`` is the epoch of the batch just served, counted from the batches consumed so far
        (saved in checkpoints), so it stays right across resumes at an epoch boundary and when a step
        consumes several batches (dynamic sampling).
        """
        for _ in range(2):
            if self._train_iter is None:
                self._train_iter = iter(self.train_dataloader)
            try:
                batch = next(self._train_iter)
            except StopIteration:
                self._train_iter = None
                continue
            self._batches_consumed += 1
            self.epoch = (self._batches_consumed - 1) // len(self.train_dataloader)
            return batch
        raise RuntimeError("the train dataloader yielded no batch twice in a row; is the dataset empty?")
