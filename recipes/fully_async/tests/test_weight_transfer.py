"""Weight transfer between pools: the bucket protocol over a real gloo group (ranks as threads of this
process), the object-store path, and loading into plain modules; every tensor arrives bit-exact."""

import threading

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config
from verl.workers.rollout.weight_group import WeightSyncGroup, host_store
from verl.workers.tiny import tiny_config
from verl_recipe_fully_async.weight_transfer import (
    buckets_of,
    load_full_weights,
    receive_into,
)


def tiny(seed):
    cfg = Qwen2Config(**tiny_config(40, "xxxs", tie_word_embeddings=False))
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg)


def same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("receivers", [1, 2])
def test_buckets_broadcast_over_a_gloo_group_spanning_both_sides(receivers):
    source = tiny(0)
    targets = [tiny(i + 1) for i in range(receivers)]
    assert not any(same_weights(source, t) for t in targets)
    size = 1 + receivers
    store = host_store("127.0.0.1", size, timeout_s=60)
    loaded, sent, errors = {}, {}, []

    def member(rank):
        try:
            group = WeightSyncGroup(
                "127.0.0.1", store.port, rank, size, store=store if rank == 0 else None, timeout_s=60
            )
            if rank == 0:
                # 4 KiB buckets: the embedding (40 x 16 fp32 = 2.5 KiB) and the MLP split across buckets
                sent[0] = group.send_buckets(_small_buckets(source.state_dict(), 4096))
            else:
                loaded[rank] = receive_into(targets[rank - 1], group.recv_buckets())
        except BaseException as e:  # surfaced by the assertion below
            errors.append(e)

    # daemon threads and a 60 s collective timeout: a failing receiver must fail the test, not leave a
    # sender blocked in a broadcast that keeps pytest from exiting
    threads = [threading.Thread(target=member, args=(r,), daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    n = len(source.state_dict())
    assert all(loaded[r] == n for r in range(1, size))
    assert sent[0] >= sum(v.numel() * v.element_size() for v in source.state_dict().values())
    assert all(same_weights(source, t) for t in targets)


def _small_buckets(state, nbytes):
    from verl.workers.rollout.weight_sync import iter_weight_buckets

    return iter_weight_buckets(state.items(), nbytes)


def test_object_store_path_delivers_the_same_weights(ray_cluster):
    ray = ray_cluster
    source, target = tiny(0), tiny(1)
    refs = [ray.put(b) for b in buckets_of(source.state_dict(), 1)]
    assert len(refs) == 1  # 1 MiB: one bucket for this model
    assert receive_into(target, (ray.get(r) for r in refs)) == len(source.state_dict())
    assert same_weights(source, target)


def test_unknown_weight_name_is_an_error():
    with pytest.raises(KeyError, match="no counterpart"):
        load_full_weights(tiny(0), [("model.extra.weight", torch.zeros(2))])


def _load_into_sharded(rank, world, out_dir):
    """Two rollout ranks with an FSDP2-sharded copy each take the same full tensors (as broadcast to them)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    source, module = tiny(0), tiny(1)
    for layer in module.model.layers:
        fully_shard(layer)
    fully_shard(module)
    assert all(isinstance(p, DTensor) for p in module.parameters())
    load_full_weights(module, source.state_dict().items())
    full = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))
    same = all(torch.equal(full[k].cpu(), v) for k, v in source.state_dict().items())
    torch.save(same, f"{out_dir}/rank{rank}.pt")
    dist.barrier()


@pytest.mark.slow  # two spawned processes
def test_fsdp2_sharded_rollout_ranks_load_their_shards(tmp_path):
    from verl.workers.engine.testing import run_gloo

    run_gloo(_load_into_sharded, 2, str(tmp_path), str(tmp_path))
    assert torch.load(tmp_path / "rank0.pt") and torch.load(tmp_path / "rank1.pt")
