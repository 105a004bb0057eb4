"""StatefulPromptLoader: seeded shuffling, batches per epoch, exact resume mid-epoch and at epoch boundaries."""

import pytest
import torch
from verl.utils.dataset import StatefulPromptLoader, create_prompt_loader


def _dataset(n):
    return [{"input_ids": torch.tensor([i]), "uid_src": f"p{i}"} for i in range(n)]


def _ids(batch):
    return batch["input_ids"][:, 0].tolist()


def _run(loader, epochs):
    out = []
    for _ in range(epochs):
        out.append([_ids(b) for b in loader])
    return out


def test_len_and_epoch_coverage():
    loader = StatefulPromptLoader(_dataset(10), batch_size=3, shuffle=True, seed=7)
    assert len(loader) == 3  # 10 // 3, last partial batch dropped
    epochs = _run(loader, 3)
    for ep in epochs:
        flat = [i for b in ep for i in b]
        assert len(flat) == 9 and len(set(flat)) == 9 and set(flat) <= set(range(10))
    assert epochs[0] != epochs[1]  # a new order each epoch
    assert loader.state_dict()["epoch"] == 3 and loader.state_dict()["batch_index"] == 0
    assert len(StatefulPromptLoader(_dataset(10), batch_size=3, drop_last=False)) == 4


def test_order_depends_only_on_seed_and_epoch():
    a = _run(StatefulPromptLoader(_dataset(12), 4, shuffle=True, seed=3), 2)
    b = _run(StatefulPromptLoader(_dataset(12), 4, shuffle=True, seed=3), 2)
    c = _run(StatefulPromptLoader(_dataset(12), 4, shuffle=True, seed=4), 2)
    assert a == b and a != c
    # the same order as an independent computation of the permutation
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(3 + 1)).tolist()
    assert [i for batch in a[1] for i in batch] == perm
    plain = _run(StatefulPromptLoader(_dataset(6), 2, shuffle=False), 1)
    assert plain == [[[0, 1], [2, 3], [4, 5]]]


@pytest.mark.parametrize("stop_after", [1, 2, 3, 4, 5, 7])  # 3 batches/epoch: 3 and 6 are epoch boundaries
def test_resume_matches_an_uninterrupted_run(stop_after):
    def flat_batches(loader, n_epochs_total):
        out = []
        while loader.state_dict()["epoch"] < n_epochs_total:
            out += [_ids(b) for b in loader]
        return out

    reference = flat_batches(StatefulPromptLoader(_dataset(10), 3, shuffle=True, seed=11), 3)
    assert len(reference) == 9

    first = StatefulPromptLoader(_dataset(10), 3, shuffle=True, seed=11)
    seen = []
    it = iter(first)
    while len(seen) < stop_after:
        try:
            seen.append(_ids(next(it)))
        except StopIteration:
            it = iter(first)  # the trainer starts the next epoch with a new for-loop
    state = dict(first.state_dict())
    assert state["epoch"] * 3 + state["batch_index"] == stop_after

    resumed = StatefulPromptLoader(_dataset(10), 3, shuffle=True, seed=11)
    resumed.load_state_dict(state)
    rest = flat_batches(resumed, 3)
    assert seen + rest == reference
    assert len(rest) == 9 - stop_after  # never zero steps unless the run was over


def test_resume_with_worker_processes_gives_the_same_batches():
    ref = _run(StatefulPromptLoader(_dataset(8), 2, seed=5), 2)
    loader = StatefulPromptLoader(_dataset(8), 2, seed=5, num_workers=1)
    got = _run(loader, 2)
    assert got == ref


def test_bad_sizes_and_mismatched_state():
    with pytest.raises(ValueError, match="3 prompts, fewer than one batch of 4"):
        StatefulPromptLoader(_dataset(3), 4)
    loader = StatefulPromptLoader(_dataset(10), 3, seed=1)
    with pytest.raises(ValueError, match="saved seed=2 but now seed=1"):
        loader.load_state_dict({"epoch": 0, "batch_index": 1, "seed": 2})
    with pytest.raises(ValueError, match="batch_index=3 is outside 0..2"):
        loader.load_state_dict({"epoch": 0, "batch_index": 3})


def test_create_prompt_loader_from_data_config():
    from verl.trainer.config import load_config

    cfg = load_config(["data.train_batch_size=4", "data.val_batch_size=null", "data.seed=9"])
    train = create_prompt_loader(_dataset(10), cfg.data, train=True)
    assert (len(train), train.shuffle, train.seed, train.drop_last) == (2, True, 9, True)
    val = create_prompt_loader(_dataset(10), cfg.data, train=False)
    assert (len(val), val.shuffle, val.drop_last) == (1, False, False)
    assert _run(val, 1) == [[list(range(10))]]


class _ReverseSampler:
    """A deterministic custom order: reversed on even epochs, forward on odd ones."""

    def __init__(self, n):
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter(range(self.n - 1, -1, -1) if self.epoch % 2 == 0 else range(self.n))


def test_custom_sampler_order_and_resume():
    from verl.utils.dataset import create_rl_dataloader

    loader = create_rl_dataloader(_dataset(6), batch_size=2, seed=0, sampler=_ReverseSampler(6))
    assert _run(loader, 2) == [[[5, 4], [3, 2], [1, 0]], [[0, 1], [2, 3], [4, 5]]]
    resumed = create_rl_dataloader(_dataset(6), batch_size=2, seed=0, sampler=_ReverseSampler(6))
    resumed.load_state_dict({"epoch": 1, "batch_index": 2})
    assert _run(resumed, 1) == [[[4, 5]]]
