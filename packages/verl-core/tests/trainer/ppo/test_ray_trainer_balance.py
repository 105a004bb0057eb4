"""trainer.balance_batch: equal-size parts with even token sums, applied as a row permutation."""

import itertools

import numpy as np
import pytest
import torch
from verl.protocol import DataProto
from verl.trainer.ppo.balance import balance_batch, balanced_partitions


def test_hand_example_is_optimal():
    lengths = [10, 9, 1, 1, 8, 2, 3, 2]
    parts = balanced_partitions(lengths, 2)
    # By hand: LPT with 4 rows per part gives {10,3,2,2}=17 and {9,1,1,8}=19; no split does 18/18.
    assert parts == [[0, 5, 6, 7], [1, 2, 3, 4]]
    best = min(abs(36 - 2 * sum(lengths[i] for i in c)) for c in itertools.combinations(range(8), 4))
    assert best == 2


def test_parts_cover_rows_and_beat_contiguous_chunks():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 100, size=24).tolist()
    parts = balanced_partitions(lengths, 4)
    assert sorted(i for p in parts for i in p) == list(range(24)) and all(len(p) == 6 for p in parts)
    sums = [sum(lengths[i] for i in p) for p in parts]
    chunk_sums = [sum(lengths[i:i + 6]) for i in range(0, 24, 6)]
    assert max(sums) - min(sums) <= max(lengths)
    assert max(sums) - min(sums) <= max(chunk_sums) - min(chunk_sums)


def test_indivisible_is_an_error():
    with pytest.raises(ValueError, match="7 rows into 2"):
        balanced_partitions([1] * 7, 2)


def test_balance_batch_permutes_rows_together():
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    data = DataProto.from_dict({"attention_mask": mask, "row": torch.arange(4)},
                               non_tensors={"uid": np.array(["a", "b", "c", "d"], dtype=object)})
    metrics = {}
    balance_batch(data, 2, metrics)
    # lengths 4,1,3,1: 4 -> part 0, 3 -> part 1, 1 (row 1) -> part 1 (3 < 4), 1 (row 3) -> part 0 (tie, lower id)
    assert data.batch["row"].tolist() == [0, 3, 1, 2]
    assert metrics["global_seqlen/max"] == 5 and metrics["global_seqlen/min"] == 4
    mask2 = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 0, 0, 0], [1, 0, 0, 0]])
    data2 = DataProto.from_dict({"attention_mask": mask2, "row": torch.arange(4)},
                                non_tensors={"uid": np.array(["a", "b", "c", "d"], dtype=object)})
    balance_batch(data2, 2, {})
    # lengths 4,3,1,1 (contiguous chunks: 7 vs 2): 4 -> part 0, 3 -> part 1, row 2 -> part 1 (3 < 4),
    # row 3 -> part 0 (4 = 4, lower id): parts {0,3} = 5 and {1,2} = 4
    assert data2.batch["row"].tolist() == [0, 3, 1, 2]
    assert data2.non_tensor_batch["uid"].tolist() == ["a", "d", "b", "c"]
