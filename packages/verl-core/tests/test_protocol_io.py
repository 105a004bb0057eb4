"""DataProto serialization, iteration, tensordict interop, DataProtoFuture and import cost."""

import copy
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from verl import DataProto, DataProtoFuture
from verl.utils.tensor_batch import TensorBatch


def make(n=8):
    g = torch.Generator().manual_seed(0)
    tensors = {
        "ids": torch.randint(0, 100, (n, 5), generator=g),
        "logp": torch.randn(n, 5, generator=g),
        "mask": torch.rand(n, 5, generator=g) > 0.5,
        "half": torch.randn(n, 2, generator=g).to(torch.bfloat16),
        "scalar_per_row": torch.arange(n, dtype=torch.float64),
    }
    uid = np.array([f"u{i}" for i in range(n)], dtype=object)
    extra = np.empty(n, dtype=object)
    for i in range(n):
        extra[i] = {"i": i, "gt": str(i * 3)}
    return DataProto.from_dict(tensors, {"uid": uid, "extra": extra}, {"step": 3, "metrics": {"a": [1.0]}})


def assert_same(a: DataProto, b: DataProto):
    assert a.batch.batch_size == b.batch.batch_size
    assert list(a.batch.keys()) == list(b.batch.keys())
    for k in a.batch.keys():
        assert a.batch[k].dtype == b.batch[k].dtype and torch.equal(a.batch[k], b.batch[k]), k
    assert a.non_tensor_batch.keys() == b.non_tensor_batch.keys()
    for k in a.non_tensor_batch:
        assert list(a.non_tensor_batch[k]) == list(b.non_tensor_batch[k]), k
    assert a.meta_info == b.meta_info


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickle_round_trip_all_protocols(protocol):
    d = make()
    out = pickle.loads(pickle.dumps(d, protocol=protocol))
    assert_same(out, d)
    out.batch["ids"][0, 0] = -5  # loaded tensors are writable and do not alias the source
    assert d.batch["ids"][0, 0] != -5


def test_pickle_non_contiguous_grad_and_empty_tensors():
    base = torch.arange(24.0).view(4, 6)
    w = torch.ones(4, 2, requires_grad=True)
    d = DataProto.from_dict({"t": base[:, ::2], "w": w, "empty": torch.zeros(4, 0)})
    assert not d.batch["t"].is_contiguous()
    out = pickle.loads(pickle.dumps(d, protocol=5))
    assert torch.equal(out.batch["t"], base[:, ::2])
    assert out.batch["w"].requires_grad and torch.equal(out.batch["w"], w)
    assert out.batch["empty"].shape == (4, 0)


def test_pickle_out_of_band_buffers_are_copied_when_read_only():
    d = make(4)
    buffers = []
    blob = pickle.dumps(d, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 5  # one per tensor, none inlined
    read_only = [memoryview(bytes(b.raw())) for b in buffers]
    out = pickle.loads(blob, buffers=read_only)
    assert_same(out, d)
    out.batch["logp"].add_(1.0)  # must not fail (or write into the read-only buffer)
    assert torch.allclose(out.batch["logp"], d.batch["logp"] + 1.0)


def test_save_and_load_from_disk(tmp_path):
    d = make()
    path = tmp_path / "batch.pkl"
    d.save_to_disk(path)
    assert_same(DataProto.load_from_disk(path), d)
    (tmp_path / "other.pkl").write_bytes(pickle.dumps({"x": 1}))
    with pytest.raises(TypeError, match="holds a dict, not a DataProto"):
        DataProto.load_from_disk(tmp_path / "other.pkl")


def test_copy_and_deepcopy():
    d = make(3)
    deep = copy.deepcopy(d)
    deep.batch["ids"].zero_()
    deep.non_tensor_batch["extra"][0]["i"] = 77
    assert d.batch["ids"].abs().sum() > 0 and d.non_tensor_batch["extra"][0]["i"] == 0


def test_torch_cat_and_stack_on_tensor_batches():
    a, b = make(2).batch, make(3).batch
    cat = torch.cat([a, b])
    assert isinstance(cat, TensorBatch) and cat.batch_size == torch.Size([5])
    assert torch.equal(cat["ids"], torch.cat([a["ids"], b["ids"]]))
    st = torch.stack([a[0], a[1]])
    assert st.batch_size == torch.Size([2]) and torch.equal(st["logp"], a["logp"])


def test_make_iterator_epochs_and_sequential_order():
    d = make(8)
    batches = list(d.make_iterator(mini_batch_size=4, epochs=2))
    assert len(batches) == 4
    assert [list(b.non_tensor_batch["uid"]) for b in batches] == [
        ["u0", "u1", "u2", "u3"],
        ["u4", "u5", "u6", "u7"],
    ] * 2
    assert all(b.meta_info is d.meta_info for b in batches)
    assert torch.equal(batches[1].batch["logp"], d.batch["logp"][4:])
    with pytest.raises(ValueError, match="8 rows do not divide into mini-batches of 3"):
        d.make_iterator(mini_batch_size=3, epochs=1)


def test_make_iterator_shuffle_seed_determinism():
    d = make(8)

    def order(seed):
        it = d.make_iterator(mini_batch_size=2, epochs=2, seed=seed, dataloader_kwargs={"shuffle": True})
        return [u for b in it for u in b.non_tensor_batch["uid"]]

    first = order(1)
    assert first == order(1)
    assert first != order(2)
    # each epoch is a permutation of all rows, and the two epochs differ (the generator advances)
    assert sorted(first[:8]) == sorted(first[8:]) == sorted(f"u{i}" for i in range(8))
    assert first[:8] != first[8:]
    # rows stay aligned across fields after shuffling
    for b in d.make_iterator(mini_batch_size=2, epochs=1, seed=1, dataloader_kwargs={"shuffle": True}):
        rows = [int(u[1:]) for u in b.non_tensor_batch["uid"]]
        assert torch.equal(b.batch["ids"], d.batch["ids"][rows])
        assert [e["i"] for e in b.non_tensor_batch["extra"]] == rows


def test_tensordict_round_trip():
    tensordict = pytest.importorskip("tensordict")
    d = make(4)
    td = d.to_tensordict()
    assert isinstance(td, tensordict.TensorDict)
    back = DataProto.from_tensordict(td)
    assert_same(back, d)
    assert isinstance(DataProto(batch=td.select("ids", "logp")).batch, TensorBatch)


def test_tensordict_missing_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensordict", None)  # makes `import tensordict` fail
    with pytest.raises(ImportError, match=r"pip install verl-core\[tensordict\]"):
        make(2).to_tensordict()
    with pytest.raises(ImportError, match=r"pip install verl-core\[tensordict\]"):
        DataProto.from_tensordict(object())


def test_import_verl_is_light():
    code = (
        "import sys, verl; assert 'torch' not in sys.modules, 'import verl loaded torch';"
        "from verl import DataProto;"
        "bad = [m for m in ('ray', 'tensordict', 'transformers', 'pandas') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_dataproto_future_chunk_and_get_through_ray(ray_cluster):
    ray = ray_cluster
    parts = [make(4), make(4)]
    for rank, p in enumerate(parts):
        p.batch["ids"] += 1000 * rank
        p.meta_info = {"step": 3}
    refs = [ray.put(p) for p in parts]
    future = DataProtoFuture.concat(refs)
    full = future.get()
    assert torch.equal(full.batch["ids"], torch.cat([parts[0].batch["ids"], parts[1].batch["ids"]]))

    @ray.remote(num_cpus=0.1)
    def consume(fut):
        # runs in a worker: it resolves the refs itself, the driver never holds the data
        data = fut.get()
        return data.batch["ids"][:, 0].tolist(), list(data.non_tensor_batch["uid"])

    chunk_futures = future.chunk(4)
    results = ray.get([consume.remote(f) for f in chunk_futures])
    expected = full.batch["ids"][:, 0].tolist()
    assert [r[0] for r in results] == [expected[i * 2 : i * 2 + 2] for i in range(4)]
    assert [u for r in results for u in r[1]] == list(full.non_tensor_batch["uid"])


def test_dataproto_future_rejects_non_dataproto(ray_cluster):
    ref = ray_cluster.put({"not": "a DataProto"})
    with pytest.raises(TypeError, match="object ref 0 resolved to a dict"):
        DataProtoFuture.concat([ref]).get()
