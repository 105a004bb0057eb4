"""Bucketed weight sync bookkeeping: every tensor arrives intact, buckets respect the size cap."""

import pytest
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.weight_sync import (
    WeightBucketReceiver,
    full_named_parameters,
    iter_weight_buckets,
    receive_state_dict,
    sync_weights,
)


def mixed_state_dict():
    g = torch.Generator().manual_seed(0)
    return {
        "embed.weight": torch.randn(50, 8, generator=g),  # 1600 bytes: bigger than a 256-byte bucket
        "ln.weight": torch.randn(8, generator=g).to(torch.bfloat16),
        "scale": torch.tensor(3.5, dtype=torch.float16),  # 0-dim
        "steps": torch.arange(7, dtype=torch.int64),
        "flags": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 4),
        "head.weight": torch.randn(3, 5, generator=g, dtype=torch.float64),
        "odd": torch.randint(0, 255, (13,), generator=g, dtype=torch.uint8),  # 13 bytes: misaligns the next
        "after_odd": torch.randn(4, generator=g),
    }


@pytest.mark.parametrize("bucket_size", [16, 64, 256, 1 << 20])
def test_all_tensors_arrive_intact(bucket_size):
    sd = mixed_state_dict()
    buckets = list(iter_weight_buckets(sd.items(), bucket_size))
    assert all(b.buffer.dtype == torch.uint8 and b.buffer.numel() <= bucket_size for b in buckets)
    got = receive_state_dict(buckets)
    assert list(got) == list(sd)
    for name, t in sd.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape, name
        assert torch.equal(got[name], t), name
    # the payload is all there: bytes in the metadata add up to the tensors' sizes
    sent = sum(m.nbytes for b in buckets for m in b.metas)
    assert sent == sum(t.numel() * t.element_size() for t in sd.values())


def test_large_tensor_is_split_and_small_ones_are_not():
    sd = mixed_state_dict()
    buckets = list(iter_weight_buckets(sd.items(), 256))
    pieces = [m for b in buckets for m in b.metas if m.name == "embed.weight"]
    assert len(pieces) == 7  # ceil(1600 / 256): it starts in an empty bucket and fills each one
    assert [p.chunk_offset for p in pieces] == [256 * i for i in range(7)]
    for name in ("ln.weight", "steps", "head.weight", "after_odd"):
        assert len([m for b in buckets for m in b.metas if m.name == name]) == 1, name
    # offsets inside a bucket are 16-byte aligned and pieces never overlap
    for b in buckets:
        ends = 0
        for m in b.metas:
            assert m.offset % 16 == 0 and m.offset >= ends
            ends = m.offset + m.nbytes


def test_one_bucket_when_everything_fits():
    sd = mixed_state_dict()
    assert len(list(iter_weight_buckets(sd.items(), 1 << 20))) == 1


def test_received_tensors_do_not_alias_the_bucket():
    (bucket,) = iter_weight_buckets([("w", torch.ones(4))], 64)
    ((_, w),) = WeightBucketReceiver().receive(bucket)
    bucket.buffer.zero_()  # a transport reuses its buffer for the next bucket
    assert torch.equal(w, torch.ones(4))


def test_missing_bucket_is_reported():
    buckets = list(iter_weight_buckets([("big", torch.randn(40))], 64))  # 160 bytes -> 3 buckets
    receiver = WeightBucketReceiver()
    receiver.receive(buckets[0])
    with pytest.raises(ValueError, match="'big'.*expected bytes from offset 64, got offset 128"):
        receiver.receive(buckets[2])
    receiver2 = WeightBucketReceiver()
    receiver2.receive(buckets[0])
    with pytest.raises(ValueError, match="incomplete tensors.*'big': '64/160 bytes'"):
        receiver2.finish()


class _OwnWeightsRollout(BaseRollout):
    """An engine with its own copy of the weights (what vLLM/SGLang look like to the trainer)."""

    def __init__(self, module):
        self.module = module
        self.calls = []

    def generate_sequences(self, prompts):
        raise NotImplementedError

    def update_weights(self, weights):
        weights = list(weights)
        self.calls.append([n for n, _ in weights])
        params = dict(self.module.named_parameters())
        with torch.no_grad():
            for name, value in weights:
                params[name].copy_(value)


def test_sync_weights_streams_into_an_engine_copy():
    torch.manual_seed(0)
    trainer = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    engine_module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    engine = _OwnWeightsRollout(engine_module)
    stats = sync_weights(full_named_parameters(trainer), engine, bucket_size_bytes=256)
    for (n, a), (_, b) in zip(trainer.named_parameters(), engine_module.named_parameters()):
        assert torch.equal(a, b), n
    assert stats.num_tensors == 4
    assert stats.max_bucket_bytes <= 256
    # by hand: 0.weight (512 B) fills 2 buckets, 0.bias (64 B) opens a 3rd, 1.weight (256 B) does not
    # fit beside it and takes a 4th, 1.bias (16 B) a 5th. The first bucket completes no tensor.
    assert stats.num_buckets == 5
    assert engine.calls == [["0.weight"], ["0.bias"], ["1.weight"], ["1.bias"]]
    assert stats.total_bytes == 512 + 64 + 256 + 16


def test_engine_without_update_weights_says_so():
    class NoSync(BaseRollout):
        def generate_sequences(self, prompts):
            raise NotImplementedError

    with pytest.raises(NotImplementedError, match="NoSync holds its own weights"):
        NoSync().update_weights([])
