"""A prompt loader with seeded shuffling and a resumable position (epoch, batch index).

The order of epoch ``e`` depends only on ``(seed, e)``, so a loader restored from `state_dict` yields
exactly the batches an uninterrupted run would have, mid-epoch or at an epoch boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from verl.utils.dataset.rl_dataset import collate_fn as default_collate


class StatefulPromptLoader:
    """Iterate one epoch of batches per ``for`` loop, starting from the saved position.

    A batch counts as consumed once it is handed out: `state_dict` taken after processing it resumes
    with the next one. After the last batch of an epoch the position moves to (epoch + 1, 0).
    ``len(loader)`` is the number of batches per epoch.

    ``sampler`` (optional, e.g. a curriculum) replaces the seeded shuffle: an iterable of dataset indices,
    iterated once per epoch after ``set_epoch(epoch)`` when it has one. Resume is exact only if its
    order depends on the epoch alone.
    """

    def __init__(
        self,
        dataset,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        collate_fn: Callable[[list], Any] = default_collate,
        num_workers: int = 0,
        sampler: Iterable[int] | None = None,
    ):
        if batch_size <= 0:
            raise ValueError(f"batch_size={batch_size} must be positive")
        n = len(dataset)
        if drop_last and n < batch_size:
            raise ValueError(
                f"the dataset has {n} prompts, fewer than one batch of {batch_size}: with drop_last no batch "
                "would ever be produced; lower data.train_batch_size or add data"
            )
        if n == 0:
            raise ValueError("the dataset is empty")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.collate_fn = collate_fn
        self.num_workers = int(num_workers)
        self.sampler = sampler
        self.epoch = 0
        self.batch_index = 0

    def __len__(self) -> int:
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def epoch_order(self, epoch: int) -> list[int]:
        """Dataset indices in the order epoch ``epoch`` visits them."""
        n = len(self.dataset)
        if self.sampler is not None:
            set_epoch = getattr(self.sampler, "set_epoch", None)  # third-party samplers (torch convention)
            if set_epoch is not None:
                set_epoch(epoch)
            return [int(i) for i in self.sampler]
        if not self.shuffle:
            return list(range(n))
        gen = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(n, generator=gen).tolist()

    def _batches(self, epoch: int, start: int) -> list[list[int]]:
        order = self.epoch_order(epoch)
        return [order[b * self.batch_size : (b + 1) * self.batch_size] for b in range(start, len(self))]

    def __iter__(self) -> Iterator[Any]:
        epoch, start, num = self.epoch, self.batch_index, len(self)
        index_batches = self._batches(epoch, start)
        if self.num_workers > 0:
            # Worker processes only run __getitem__ + collate; the position is still kept here.
            source = iter(
                torch.utils.data.DataLoader(
                    self.dataset,
                    batch_sampler=index_batches,
                    collate_fn=self.collate_fn,
                    num_workers=self.num_workers,
                )
            )
        else:
            source = (self.collate_fn([self.dataset[i] for i in idx]) for idx in index_batches)
        for b, batch in zip(range(start, num), source):
            if b + 1 == num:
                self.epoch, self.batch_index = epoch + 1, 0
            else:
                self.epoch, self.batch_index = epoch, b + 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        """Position of the next batch: ``{"epoch", "batch_index"}`` (plus sizes, checked on load)."""
        return {
            "epoch": self.epoch,
            "batch_index": self.batch_index,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "num_batches": len(self),
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore a position saved by `state_dict`; a different seed or batch layout is an error."""
        current = {"seed": self.seed, "batch_size": self.batch_size, "num_batches": len(self)}
        for key, now in current.items():
            if key in state and int(state[key]) != now:
                raise ValueError(
                    f"cannot resume the prompt loader: saved {key}={state[key]} but now {key}={now}; "
                    "the data, batch size or seed changed since the checkpoint"
                )
        batch_index = int(state["batch_index"])
        if not 0 <= batch_index < len(self):
            raise ValueError(f"saved batch_index={batch_index} is outside 0..{len(self) - 1}")
        self.epoch = int(state["epoch"])
        self.batch_index = batch_index


def create_prompt_loader(
    dataset, data_config, train: bool = True, batch_size: int | None = None, collate_fn=default_collate
) -> StatefulPromptLoader:
    """The loader the ``data`` config describes.

    Train: ``data.train_batch_size`` prompts (or ``batch_size``, e.g. ``data.gen_batch_size`` for dynamic
    sampling), shuffled by ``data.shuffle`` with ``data.seed``, dropping the last partial batch.
    Validation: ``data.val_batch_size`` (None: the whole set in one batch), ``data.validation_shuffle``,
    keeping the last partial batch.
    """
    if train:
        size = batch_size if batch_size is not None else data_config.train_batch_size
        shuffle, drop_last = data_config.shuffle, True
    else:
        size = batch_size if batch_size is not None else (data_config.val_batch_size or len(dataset))
        shuffle, drop_last = data_config.get("validation_shuffle", False), False
    return StatefulPromptLoader(
        dataset,
        batch_size=int(size),
        shuffle=bool(shuffle),
        seed=int(data_config.get("seed", 1) or 0),
        drop_last=drop_last,
        collate_fn=collate_fn,
        num_workers=int(data_config.get("dataloader_num_workers", 0) or 0),
    )


def create_rl_dataloader(
    dataset,
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    collate_fn: Callable[[list], Any] = default_collate,
    drop_last: bool = True,
    sampler: Iterable[int] | None = None,
    num_workers: int = 0,
) -> StatefulPromptLoader:
    """Keyword-compatible constructor used by the trainer: a `StatefulPromptLoader`."""
    return StatefulPromptLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        collate_fn=collate_fn,
        num_workers=num_workers,
        sampler=sampler,
    )
