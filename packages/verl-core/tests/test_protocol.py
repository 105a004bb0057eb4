"""DataProto row and key operations against independently computed expectations."""

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.protocol import (
    DataProtoConfig,
    DataProtoItem,
    collate_fn,
    fold_batch_dim,
    list_of_dict_to_dict_of_list,
    pad_dataproto_to_divisor,
    unfold_batch_dim,
    union_numpy_dict,
    union_tensor_dict,
    unpad_dataproto,
)


def make(n=6, width=3, meta=None):
    """Row i has obs == [i*width .. i*width+width-1], rew == i / 2, uid == f'u{i}', info == {'i': i}."""
    obs = torch.arange(n * width).view(n, width)
    rew = torch.arange(n, dtype=torch.float32) / 2
    uid = np.array([f"u{i}" for i in range(n)], dtype=object)
    info = np.empty(n, dtype=object)
    for i in range(n):
        info[i] = {"i": i}
    return DataProto.from_dict({"obs": obs, "rew": rew}, {"uid": uid, "info": info}, meta or {"step": 1})


def rows_of(data):
    """The row ids a DataProto holds, read from every field; they must agree."""
    from_obs = (data.batch["obs"][:, 0] // data.batch["obs"].shape[1]).tolist()
    from_rew = (data.batch["rew"] * 2).long().tolist()
    from_uid = [int(u[1:]) for u in data.non_tensor_batch["uid"]]
    from_info = [d["i"] for d in data.non_tensor_batch["info"]]
    assert from_obs == from_rew == from_uid == from_info
    return from_obs


def test_from_dict_fields_and_len():
    d = make(5)
    assert len(d) == 5
    assert d.batch.batch_size == torch.Size([5]) and d.batch.batch_size[0] == 5
    assert set(d.batch.keys()) == {"obs", "rew"} and "obs" in d.batch and "uid" not in d.batch
    assert d.non_tensor_batch["uid"].dtype == object
    assert d.meta_info == {"step": 1}
    assert rows_of(d) == [0, 1, 2, 3, 4]


def test_from_dict_converts_lists_to_1d_object_arrays():
    d = DataProto.from_dict(
        {"x": torch.zeros(2, 1)}, {"msgs": [[{"role": "user"}], [{"role": "a"}, {"role": "b"}]]}
    )
    arr = d.non_tensor_batch["msgs"]
    assert arr.dtype == object and arr.shape == (2,)
    assert arr[1] == [{"role": "a"}, {"role": "b"}]


def test_from_dict_rejects_mismatched_rows_naming_keys_and_sizes():
    with pytest.raises(ValueError, match=r"'a'.*\(3,\).*'b'.*\(4,\)"):
        DataProto.from_dict({"a": torch.zeros(3, 2), "b": torch.zeros(4, 2)})
    with pytest.raises(ValueError, match=r"non_tensor_batch\['uid'\] has 2 rows but batch has 3"):
        DataProto.from_dict({"a": torch.zeros(3)}, {"uid": np.array(["x", "y"], dtype=object)})
    with pytest.raises(TypeError, match=r"tensors\['a'\] must be a torch.Tensor, got list"):
        DataProto.from_dict({"a": [1, 2]})
    with pytest.raises(TypeError, match=r"non_tensor_batch\['u'\] must be a numpy array"):
        DataProto(batch=None, non_tensor_batch={"u": "abc"})


def test_from_single_dict_splits_by_type():
    d = DataProto.from_single_dict(
        {"a": torch.ones(2, 2), "s": np.array(["p", "q"], dtype=object)}, meta_info={"m": 3}
    )
    assert list(d.batch.keys()) == ["a"] and list(d.non_tensor_batch) == ["s"] and d.meta_info == {"m": 3}
    with pytest.raises(TypeError, match="'bad' is a str"):
        DataProto.from_single_dict({"bad": "x"})


def test_batch_mapping_interface():
    d = make(4)
    d.batch["new"] = torch.full((4, 2), 7)
    assert d.batch["new"].sum().item() == 56
    with pytest.raises(ValueError, match=r"batch\['bad'\] has shape \(3,\).*\(4,\)"):
        d.batch["bad"] = torch.zeros(3)
    d.batch.update({"u2": torch.ones(4)})
    assert sorted(k for k, _ in d.batch.items()) == ["new", "obs", "rew", "u2"]
    assert len(list(d.batch.values())) == 4
    sub = d.batch.select("obs")
    assert list(sub.keys()) == ["obs"] and sub["obs"] is d.batch["obs"]
    cl = d.batch.clone()
    cl["obs"][0, 0] = 100
    assert d.batch["obs"][0, 0] == 0
    assert len(d.batch) == 4
    with pytest.raises(KeyError, match="'nope' not in batch"):
        d.batch["nope"]


def test_int_index_returns_item():
    d = make(4)
    item = d[2]
    assert isinstance(item, DataProtoItem)
    assert item.batch["obs"].tolist() == [6, 7, 8]
    assert item.non_tensor_batch == {"uid": "u2", "info": {"i": 2}}
    assert item.meta_info is d.meta_info
    assert d[-1].non_tensor_batch["uid"] == "u3"
    assert d[np.int64(1)].non_tensor_batch["uid"] == "u1"
    with pytest.raises(IndexError, match="row 4 is out of range for a DataProto of 4 rows"):
        d[4]


@pytest.mark.parametrize(
    "index, expected",
    [
        (slice(1, 5, 2), [1, 3]),
        (slice(None, None, -1), None),  # checked separately below (negative steps are views in numpy only)
        ([4, 0, 0, -1], [4, 0, 0, 5]),
        (np.array([3, 1]), [3, 1]),
        (torch.tensor([2, 5]), [2, 5]),
        (np.array([True, False, True, False, False, True]), [0, 2, 5]),
        (torch.tensor([False] * 5 + [True]), [5]),
        ([True, True, False, False, False, False], [0, 1]),
        ([], []),
    ],
)
def test_row_indexing(index, expected):
    d = make(6)
    if expected is None:
        return
    assert rows_of(d[index]) == expected
    assert d[index].meta_info == {"step": 1}


def test_index_out_of_range_and_bad_mask_are_errors():
    d = make(3)
    with pytest.raises(IndexError, match="row index 3 is out of range for a batch of 3 rows"):
        d[[0, 3]]
    with pytest.raises(IndexError, match="bool mask has 2 entries but the batch has 3 rows"):
        d[np.array([True, False])]
    with pytest.raises(TypeError, match="cannot be indexed by str"):
        d["obs"]


def test_select_idxs_copies_and_slice_views():
    d = make(4)
    picked = d.select_idxs([1, 2])
    picked.batch["obs"][0, 0] = -1
    assert d.batch["obs"][1, 0] == 3
    sliced = d.slice(1, 3)
    sliced.batch["obs"][0, 0] = -1
    assert d.batch["obs"][1, 0] == -1  # slices are views, like upstream's TensorDict slices
    assert len(d.slice(None, None, 2)) == 2


def test_select_and_deepcopy():
    d = make(3, meta={"a": [1], "b": 2})
    s = d.select(batch_keys=["obs"], non_tensor_batch_keys=["uid", "absent"], meta_info_keys=["a"])
    assert (
        list(s.batch.keys()) == ["obs"] and list(s.non_tensor_batch) == ["uid"] and s.meta_info == {"a": [1]}
    )
    assert s.batch["obs"] is d.batch["obs"]
    deep = d.select(deepcopy=True)
    deep.meta_info["a"].append(5)
    deep.non_tensor_batch["info"][0]["i"] = 99
    assert d.meta_info["a"] == [1] and d.non_tensor_batch["info"][0]["i"] == 0
    with pytest.raises(KeyError, match=r"\['zzz'\] not in batch"):
        d.select(batch_keys=["zzz"])


def test_pop_removes_and_returns():
    d = make(3, meta={"a": 1, "b": 2})
    popped = d.pop(batch_keys=["rew"], non_tensor_batch_keys=["info"], meta_info_keys=["a"])
    assert list(popped.batch.keys()) == ["rew"] and list(popped.non_tensor_batch) == ["info"]
    assert popped.meta_info == {"a": 1}
    assert list(d.batch.keys()) == ["obs"] and list(d.non_tensor_batch) == ["uid"] and d.meta_info == {"b": 2}
    assert popped.batch["rew"].tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(KeyError, match="'rew' not in batch"):
        d.pop(batch_keys=["rew"])


def test_rename():
    d = make(2)
    obs = d.batch["obs"]
    assert d.rename("obs", "observation") is d
    assert "obs" not in d.batch and d.batch["observation"] is obs
    d.rename(["observation", "rew"], ["o", "r"])
    assert sorted(d.batch.keys()) == ["o", "r"]
    with pytest.raises(ValueError, match="1 old keys"):
        d.rename(["o"], ["a", "b"])
    with pytest.raises(KeyError, match="cannot rename 'zz'"):
        d.rename("zz", "yy")


def test_union_merges_and_checks_clashes():
    d = make(3, meta={"a": 1})
    other = DataProto.from_dict(
        {"obs": d.batch["obs"].clone(), "adv": torch.ones(3)},
        {"uid": d.non_tensor_batch["uid"].copy(), "extra": np.array([1.0, np.nan, 3.0])},
        {"a": 1, "b": 2},
    )
    out = d.union(other)
    assert out is d
    assert sorted(d.batch.keys()) == ["adv", "obs", "rew"] and sorted(d.non_tensor_batch) == [
        "extra",
        "info",
        "uid",
    ]
    assert d.meta_info == {"a": 1, "b": 2}
    # NaN equals NaN when the same key appears on both sides
    d.union(DataProto.from_dict(non_tensors={"extra": np.array([1.0, np.nan, 3.0])}))
    bad = DataProto.from_dict({"obs": torch.zeros(3, 3, dtype=torch.int64)})
    with pytest.raises(ValueError, match="batch key 'obs' holds different tensors"):
        d.union(bad)
    with pytest.raises(ValueError, match="non_tensor_batch key 'uid'"):
        d.union(DataProto.from_dict(non_tensors={"uid": np.array(["x", "y", "z"], dtype=object)}))
    with pytest.raises(ValueError, match="key 'a' has different values"):
        d.union(DataProto(meta_info={"a": 2}))
    with pytest.raises(ValueError, match="have 3 and 2 rows"):
        d.union(make(2))


def test_union_helpers():
    a = make(2).batch
    b = make(3).batch
    with pytest.raises(ValueError, match=r"different sizes \(2,\) and \(3,\)"):
        union_tensor_dict(a, b)
    x = {"k": np.array(["a"], dtype=object)}
    out = union_numpy_dict(x, {"j": np.array([{"z": 1}], dtype=object)})
    assert out is x and sorted(x) == ["j", "k"]


def test_reorder_in_place():
    d = make(4)
    d.reorder(torch.tensor([3, 1, 0, 2]))
    assert rows_of(d) == [3, 1, 0, 2]


def test_chunk_concat_round_trip_and_meta_merge():
    d = make(8, meta={"step": 4, "metrics": {"loss": 1.0}})
    chunks = d.chunk(4)
    assert [rows_of(c) for c in chunks] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    back = DataProto.concat(chunks)
    assert rows_of(back) == list(range(8))
    assert torch.equal(back.batch["obs"], d.batch["obs"])
    # `metrics` of each chunk are gathered into lists; other equal keys are kept once
    assert back.meta_info == {"step": 4, "metrics": {"loss": [1.0, 1.0, 1.0, 1.0]}}
    assert [len(s) for s in d.split(3)] == [3, 3, 2]
    assert rows_of(d.split(3)[2]) == [6, 7]


def test_concat_gathers_metrics_across_workers():
    parts = [make(1), make(1), make(1)]
    for rank, p in enumerate(parts):
        p.meta_info = {"metrics": {"loss": float(rank), "lr": 0.1}}
    parts[2].meta_info["metrics"]["grad_norm"] = 5.0
    out = DataProto.concat(parts)
    assert out.meta_info["metrics"] == {"loss": [0.0, 1.0, 2.0], "lr": [0.1, 0.1, 0.1], "grad_norm": [5.0]}


def test_concat_conflicting_meta_is_error_naming_key():
    a, b = make(2, meta={"temperature": 1.0}), make(2, meta={"temperature": 0.5})
    with pytest.raises(
        ValueError, match=r"meta_info key 'temperature' differs.*1.0 \(batch 0\) vs 0.5 \(batch 1\)"
    ):
        DataProto.concat([a, b])
    c = make(2)
    c.non_tensor_batch.pop("info")
    with pytest.raises(KeyError, match="batch 1 has non_tensor_batch keys"):
        DataProto.concat([make(2), c])


def test_chunk_uneven_is_error_unless_auto_padding(monkeypatch):
    d = make(7)
    with pytest.raises(ValueError, match="7 rows do not split into 3 chunks"):
        d.chunk(3)
    monkeypatch.setattr(DataProtoConfig, "_config", {})
    DataProtoConfig.auto_padding = True
    try:
        assert [len(c) for c in d.chunk(3)] == [3, 3, 1]
        assert [len(c) for c in make(6).chunk(4)] == [2, 2, 2, 0]
    finally:
        DataProtoConfig.auto_padding = False
    monkeypatch.setenv("VERL_AUTO_PADDING", "1")
    assert DataProtoConfig.auto_padding
    assert [rows_of(c) for c in d.chunk(3)] == [[0, 1, 2], [3, 4, 5], [6]]
    monkeypatch.delenv("VERL_AUTO_PADDING")
    padded = DataProto.from_dict({"x": torch.arange(5)}, auto_padding=True)
    assert padded.is_padding_enabled() and [len(c) for c in padded.chunk(2)] == [3, 2]
    with pytest.raises(TypeError, match="must be a bool"):
        DataProtoConfig.auto_padding = 1


def test_repeat_matches_loops():
    d = make(3)
    inter = d.repeat(repeat_times=3, interleave=True)
    expected_inter = [i for i in range(3) for _ in range(3)]
    assert rows_of(inter) == expected_inter
    tiled = d.repeat(repeat_times=2, interleave=False)
    assert rows_of(tiled) == [0, 1, 2, 0, 1, 2]
    for k in ("obs", "rew"):
        loop = torch.stack([d.batch[k][i] for i in expected_inter])
        assert torch.equal(inter.batch[k], loop)
    inter.batch["obs"][0, 0] = 42  # the repeat owns its memory
    assert d.batch["obs"][0, 0] == 0


def test_sample_level_repeat():
    d = make(4)
    for counts in ([2, 0, 1, 3], (2, 0, 1, 3), np.array([2, 0, 1, 3]), torch.tensor([2, 0, 1, 3])):
        assert rows_of(d.sample_level_repeat(counts)) == [0, 0, 2, 3, 3, 3]
    with pytest.raises(ValueError, match=r"shape \(2,\), expected \(4,\)"):
        d.sample_level_repeat([1, 2])


def test_padding_in_place_and_pad_unpad():
    d = make(5)
    d.padding(2)
    assert rows_of(d) == [0, 1, 2, 3, 4, 4, 4]
    e = make(3)
    e.padding(1, padding_candidate="first")
    assert rows_of(e) == [0, 1, 2, 0]
    f = make(5)
    padded, pad = pad_dataproto_to_divisor(f, 4)
    assert pad == 3 and rows_of(padded) == [0, 1, 2, 3, 4, 0, 1, 2]
    assert rows_of(unpad_dataproto(padded, pad)) == [0, 1, 2, 3, 4]
    small, pad = pad_dataproto_to_divisor(make(2), 7)  # more padding than rows: cycles
    assert pad == 5 and rows_of(small) == [0, 1, 0, 1, 0, 1, 0]
    same, pad = pad_dataproto_to_divisor(make(4), 2)
    assert pad == 0 and len(same) == 4 and unpad_dataproto(same, 0) is same


def test_to_device_returns_self():
    d = make(2)
    assert d.to("cpu") is d and d.batch["obs"].device.type == "cpu"


def test_fold_unfold_batch_dim():
    d = make(6)
    folded = fold_batch_dim(d, 2)
    assert folded.batch.batch_size == torch.Size([2]) and folded.batch["obs"].shape == (2, 3, 3)
    assert folded.non_tensor_batch["uid"].shape == (2, 3) and folded.non_tensor_batch["uid"][1, 0] == "u3"
    back = unfold_batch_dim(folded, batch_dims=2)
    assert rows_of(back) == list(range(6))
    with pytest.raises(ValueError, match="6 rows do not divide into 4"):
        fold_batch_dim(d, 4)


def test_collate_fn_and_list_of_dict():
    d = make(3)
    out = collate_fn([d[2], d[0]])
    assert rows_of(out) == [2, 0]
    assert list_of_dict_to_dict_of_list([{"a": 1, "b": 2}, {"a": 3, "b": 4}]) == {"a": [1, 3], "b": [2, 4]}
    assert list_of_dict_to_dict_of_list([]) == {}
    with pytest.raises(KeyError, match="dict 1 has keys"):
        list_of_dict_to_dict_of_list([{"a": 1}, {"b": 2}])


def test_info_and_consistency(capsys):
    d = make(2, meta={"metrics": {"loss": [1.0]}, "n": 3})
    info = d.get_data_info()
    assert "obs: (2, 3) (torch.int64) cpu" in info and "uid: ndarray(2,) (object)" in info
    assert "metrics: dict[str: list[float]]" in info and "n: int" in info
    d.print_size(prefix="tag")
    printed = capsys.readouterr().out
    assert printed.startswith("tag, Size of tensordict: ") and f"{(2 * 3 * 8 + 2 * 4) / 1024**3}" in printed
    d.check_consistency()
    d.non_tensor_batch["uid"] = np.array(["only one"], dtype=object)
    with pytest.raises(ValueError, match=r"non_tensor_batch\['uid'\] has 1 rows but batch has 2"):
        d.check_consistency()


def test_non_tensor_only_and_empty():
    d = DataProto.from_dict(non_tensors={"s": ["a", "b", "c"]})
    assert d.batch is None and len(d) == 3
    assert list(d.repeat(2).non_tensor_batch["s"]) == ["a", "a", "b", "b", "c", "c"]
    assert list(DataProto.concat(d.chunk(3)).non_tensor_batch["s"]) == ["a", "b", "c"]
    assert len(DataProto()) == 0


def test_large_outputs_take_the_hugepage_buffer_path_and_stay_correct(monkeypatch):
    from verl.utils import hugepage_alloc
    from verl.utils.hugepage_alloc import empty_cpu

    MIN_BYTES = 4 * 2**20  # lowered so modest tensors exercise the huge-page path
    monkeypatch.setattr(hugepage_alloc, "MIN_BYTES", MIN_BYTES)
    n, width = 1024, MIN_BYTES // (1024 * 8)  # one int64 tensor of exactly MIN_BYTES
    big = torch.arange(n * width, dtype=torch.int64).view(n, width)
    d = DataProto.from_dict({"big": big, "w": torch.ones(n, 2, requires_grad=True)})
    rep = d.repeat(2, interleave=True)
    assert torch.equal(rep.batch["big"], torch.repeat_interleave(big, 2, dim=0))
    assert rep.batch["w"].shape == (2 * n, 2)
    tiled = d.repeat(3, interleave=False)
    assert torch.equal(tiled.batch["big"], torch.cat([big, big, big]))
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    assert torch.equal(d[perm].batch["big"], big[perm])
    assert torch.equal(DataProto.concat(d.chunk(4) + d.chunk(2)).batch["big"], torch.cat([big, big]))
    buf = empty_cpu((3, MIN_BYTES // 8), torch.int64)
    buf.fill_(7)
    assert buf.shape == (3, MIN_BYTES // 8) and int(buf[2, -1]) == 7


def test_num_batch_dims_and_dict_batch():
    d = DataProto.from_dict({"a": torch.zeros(2, 3, 4), "b": torch.ones(2, 3)}, num_batch_dims=2)
    assert d.batch.batch_size == torch.Size([2, 3]) and len(d) == 2
    with pytest.raises(ValueError, match=r"'a' has \(2, 3\), 'b' has \(2, 4\)"):
        DataProto.from_dict({"a": torch.zeros(2, 3), "b": torch.zeros(2, 4)}, num_batch_dims=2)
    with pytest.raises(ValueError, match="non_tensors need num_batch_dims=1"):
        DataProto.from_dict({"a": torch.zeros(2, 3)}, {"s": ["x", "y"]}, num_batch_dims=2)
    e = DataProto(batch={"x": torch.arange(3)})
    assert e.batch.batch_size == torch.Size([3]) and len(e) == 3


def test_unfold_column_chunks_by_hand():
    """Upstream's semantics: split_keys' second dim cut into n_split rows each; other keys repeated."""
    data = DataProto.from_dict(
        tensors={"a": torch.arange(12).reshape(2, 6), "b": torch.tensor([10, 20])},
        non_tensors={"u": np.array(["x", "y"], dtype=object), "g": np.arange(8).reshape(2, 4)},
        meta_info={"m": 1},
    )
    out = data.unfold_column_chunks(2, split_keys=["a", "g"])
    assert out.batch["a"].tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert out.batch["b"].tolist() == [10, 10, 20, 20] and tuple(out.batch.batch_size) == (4,)
    assert out.non_tensor_batch["u"].tolist() == ["x", "x", "y", "y"]
    assert out.non_tensor_batch["g"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert out.meta_info == {"m": 1} and len(out) == 4
    every = data.unfold_column_chunks(3)  # no split_keys: every key repeated (upstream's doc)
    assert every.batch["a"].shape == (6, 6) and every.non_tensor_batch["u"].tolist() == ["x"] * 3 + ["y"] * 3
    with pytest.raises(ValueError, match=r"'a' has shape \(2, 6\).*n_split=4"):
        data.unfold_column_chunks(4, split_keys=["a"])
    with pytest.raises(ValueError, match="'b' has shape"):
        data.unfold_column_chunks(2, split_keys=["b"])
    with pytest.raises(KeyError, match=r"split_keys \['zz'\] not in the data"):
        data.unfold_column_chunks(2, split_keys=["zz"])
