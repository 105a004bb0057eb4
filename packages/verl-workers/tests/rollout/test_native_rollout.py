"""Native rollout: greedy results equal the hf engine's, sampling follows the exact distribution.

References are independent of the native loop: the hf decode loop (the model's own forward with its
KV cache), full-forward logits of the HF model, and hf's ``filter_logits``.
"""

import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen2Config, Qwen3Config
from verl.registries import ROLLOUT_ENGINES
from verl.trainer.config import load_config
from verl.workers.engine.testing import chat_prompt_batch as chat_prompts
from verl.workers.engine.testing import random_left_padded
from verl.workers.rollout import native_rollout
from verl.workers.rollout.hf_rollout import HFRollout, SamplingParams, filter_logits, generate_tokens
from verl.workers.rollout.native_rollout import NativeRollout, native_generate, sample_next
from verl.workers.tiny import tiny_config

PAD, EOS, VOCAB = 0, 1, 48

_COMMON = tiny_config(VOCAB, max_position_embeddings=128, pad_token_id=PAD, eos_token_id=EOS)


def make_model(kind: str, seed: int = 0):
    from transformers import AutoModelForCausalLM as Auto

    cfg = {
        "qwen2": lambda: Qwen2Config(tie_word_embeddings=True, **_COMMON),
        "llama": lambda: LlamaConfig(tie_word_embeddings=False, **_COMMON),
        "qwen3": lambda: Qwen3Config(tie_word_embeddings=True, head_dim=8, **_COMMON),
    }[kind]()
    torch.manual_seed(seed)
    model = Auto.from_config(cfg)
    with torch.no_grad():  # sharper than random init, so greedy paths differ per row
        model.get_input_embeddings().weight.mul_(3.0)
        if kind == "qwen2":
            for layer in model.model.layers:
                layer.self_attn.q_proj.bias.normal_(0, 0.5)  # a non-zero bias must be honoured
    return model.eval()


def left_padded(lengths, seed=0):
    return random_left_padded(lengths, VOCAB, seed=seed, pad_id=PAD)


def assert_same_generation(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for key in a:
        if key == "rollout_log_probs":
            torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0)
        else:
            assert torch.equal(a[key], b[key]), (key, a[key], b[key])


@pytest.mark.parametrize("kind", ["qwen2", "llama", "qwen3"])
def test_greedy_equals_hf_with_rows_stopping_at_different_steps(kind):
    model = make_model(kind)
    ids, mask, pos = left_padded([5, 3, 7, 1, 6, 2, 4, 7])
    params = SamplingParams(response_length=12, do_sample=False)
    free = generate_tokens(model, ids, mask, pos, params, [], PAD)["responses"]
    # EOS = tokens some rows emit at different steps, so rows leave the batch at different times
    eos = sorted({int(free[0, 1]), int(free[3, 4]), int(free[5, 0])})
    ref = generate_tokens(model, ids, mask, pos, params, eos, PAD, calculate_log_probs=True)
    got = native_generate(model, ids, mask, pos, params, eos, PAD, calculate_log_probs=True)
    lengths = ref["response_mask"].sum(-1)
    assert lengths.min() < lengths.max()  # the case this test is about
    assert_same_generation(got, ref)


def test_compaction_does_not_change_results(monkeypatch):
    model = make_model("qwen2", seed=1)
    ids, mask, pos = left_padded([4, 6, 2, 5, 3, 6], seed=3)
    params = SamplingParams(response_length=10, do_sample=False)
    free = generate_tokens(model, ids, mask, pos, params, [], PAD)["responses"]
    eos = sorted({int(free[1, 2]), int(free[4, 0])})
    outs = []
    for fraction in (0.0, 10.0):  # compact at every finished row / never compact (mask only)
        monkeypatch.setattr(native_rollout, "COMPACT_FRACTION", fraction)
        outs.append(native_generate(model, ids, mask, pos, params, eos, PAD, calculate_log_probs=True))
    assert_same_generation(outs[0], outs[1], atol=1e-6)


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson statistic over the support of ``probs``; asserts nothing lands outside the support."""
    support = probs > 0
    assert counts[~support].sum() == 0, "sampled a token that top-k/top-p removed"
    n = counts.sum()
    expected = probs[support] * n
    return float(((counts[support] - expected) ** 2 / expected).sum()), int(support.sum()) - 1


@pytest.mark.parametrize("top_k,top_p", [(-1, 1.0), (6, 1.0), (-1, 0.8), (8, 0.7)])
def test_sample_next_follows_filtered_softmax(top_k, top_p):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 20, generator=g) * 2
    params = SamplingParams(response_length=1, temperature=0.7, top_k=top_k, top_p=top_p)
    # reference: hf's filter, then softmax, on the temperature-scaled logits
    probs = torch.softmax(filter_logits(logits / 0.7, top_k, top_p), dim=-1)[0]
    n = 20000
    tokens, lp = sample_next(
        logits.expand(n, -1), params, torch.Generator().manual_seed(1), want_log_probs=True
    )
    stat, df = _chi2(torch.bincount(tokens, minlength=20).double(), probs.double())
    # mean df, sd sqrt(2 df): 6 sd above the mean fails a correct sampler with negligible probability
    assert stat < df + 6 * (2 * df) ** 0.5, (stat, df)
    torch.testing.assert_close(lp, torch.log_softmax(logits / 0.7, -1)[0, tokens])


def test_two_token_continuations_follow_the_model_distribution():
    """Joint law of (token 1, token 2) after one prompt against exact probabilities from full forwards."""
    model = make_model("qwen2", seed=2)
    ids, mask, pos = left_padded([5], seed=4)
    top_k, temp, n = 4, 0.8, 12000
    params = SamplingParams(response_length=2, temperature=temp, top_k=top_k)

    def next_probs(seq):
        with torch.no_grad():
            logits = model(input_ids=seq, attention_mask=torch.ones_like(seq)).logits[0, -1].float()
        return torch.softmax(filter_logits(logits[None] / temp, top_k, 1.0), -1)[0].double()

    joint = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    p1 = next_probs(ids)
    for a in p1.nonzero().flatten().tolist():
        joint[a] = p1[a] * next_probs(torch.cat([ids, torch.tensor([[a]])], 1))
    out = native_generate(
        model,
        ids.expand(n, -1),
        mask.expand(n, -1),
        pos.expand(n, -1),
        params,
        [],
        PAD,
        generator=torch.Generator().manual_seed(5),
    )
    pairs = out["responses"][:, 0] * VOCAB + out["responses"][:, 1]
    counts = torch.bincount(pairs, minlength=VOCAB * VOCAB).double()
    stat, df = _chi2(counts, joint.flatten())
    assert df == top_k * top_k - 1
    assert stat < df + 6 * (2 * df) ** 0.5, (stat, df)


# ---------------------------------------------------------------------------- the engine class


def rollout_config(*overrides):
    return load_config(["data.max_response_length=6", *overrides]).actor_rollout_ref.rollout


def test_registered_and_generate_sequences_equals_hf(tiny_model_dir):
    assert ROLLOUT_ENGINES.get("native") is NativeRollout
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = chat_prompts(tok, ["1+2=", "33+44=", "5+6=", "7+81="], {"do_sample": False})
    overrides = (
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.rollout.micro_batch_size=3",
    )
    ref = HFRollout(model, rollout_config(*overrides), tok).generate_sequences(prompts)
    got = NativeRollout(model, rollout_config(*overrides), tok).generate_sequences(prompts)
    assert_same_generation(dict(got.batch.items()), dict(ref.batch.items()))


def test_fsdp2_module_matches_plain_module(tiny_model_dir, tiny_tokenizer, dist_world1):
    # Sharded by hand: the engine trains the plain module on one CPU rank, multi-rank runs shard it so.
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "data.max_response_length=5",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
        ]
    )
    arr = cfg.actor_rollout_ref
    sharded = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for layer in sharded.model.layers:
        fully_shard(layer)
    fully_shard(sharded)
    prompts = chat_prompts(tiny_tokenizer, ["12+3=", "4+4=", "9+90="], {"do_sample": False})
    got = NativeRollout(sharded, arr.rollout, tiny_tokenizer).generate_sequences(prompts)
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ref = HFRollout(plain, arr.rollout, tiny_tokenizer).generate_sequences(prompts)
    assert_same_generation(dict(got.batch.items()), dict(ref.batch.items()))
    # parameters are sharded again afterwards (training runs on the DTensors)
    assert all(isinstance(p, DTensor) for p in sharded.parameters())


def test_unsupported_architecture_falls_back_to_hf_loop(tiny_tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tiny_tokenizer),
            n_embd=32,
            n_layer=1,
            n_head=2,
            eos_token_id=tiny_tokenizer.eos_token_id,
        )
    ).eval()
    prompts = chat_prompts(tiny_tokenizer, ["1+1=", "22+3="], {"do_sample": False})
    ref = HFRollout(model, rollout_config(), tiny_tokenizer).generate_sequences(prompts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = NativeRollout(model, rollout_config(), tiny_tokenizer).generate_sequences(prompts)
    assert any(
        "falls back to the hf decode loop" in str(w.message) and "gpt2" in str(w.message) for w in caught
    )
    assert_same_generation(dict(got.batch.items()), dict(ref.batch.items()))


def _two_rank_native(rank, world, model_dir, out_dir):
    """Each rank decodes its own prompts on a 2-way FSDP2-sharded model; rank 0's rows stop after one
    token (every token is EOS), rank 1's run to the end."""
    import os

    from verl.workers.engine import build_engine

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "data.max_response_length=5",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
        ]
    )
    arr = cfg.actor_rollout_ref
    engine = build_engine("fsdp2", model_config=arr.model, engine_config=arr.actor.fsdp_config)
    tok = AutoTokenizer.from_pretrained(model_dir)
    rollout = NativeRollout(engine.module, arr.rollout, tok)
    if rank == 0:
        rollout.eos_token_ids = list(range(len(tok)))
    prompts = chat_prompts(tok, ["1+2=", "33+4="] if rank == 0 else ["5+6=", "70+81="], {"do_sample": False})
    out = rollout.generate_sequences(prompts)
    torch.save(
        {"out": dict(out.batch.items()), "eos": rollout.eos_token_ids, "prompts": prompts},
        os.path.join(out_dir, f"rank{rank}.pt"),
    )


@pytest.mark.slow
def test_two_fsdp2_ranks_decode_independently_with_one_width(tmp_path, tiny_model_dir):
    from verl.workers.engine.testing import run_gloo

    run_gloo(_two_rank_native, 2, str(tmp_path), tiny_model_dir, str(tmp_path))
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    widths, ref_widths = [], []
    for rank in range(2):
        saved = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        got, b = saved["out"], saved["prompts"].batch
        ref = generate_tokens(
            plain,
            b["input_ids"],
            b["attention_mask"],
            b["position_ids"],
            SamplingParams(response_length=5, do_sample=False),
            saved["eos"],
            PAD,
            calculate_log_probs=True,
        )
        r = ref["responses"].shape[1]
        ref_widths.append(r)
        widths.append(got["responses"].shape[1])
        for key in ("responses", "response_mask"):
            assert torch.equal(got[key][:, :r], ref[key]), (rank, key)
        torch.testing.assert_close(
            got["rollout_log_probs"][:, :r], ref["rollout_log_probs"], atol=1e-5, rtol=0
        )
        assert got["response_mask"][:, r:].sum() == 0 and got["responses"][:, r:].eq(PAD).all()
        assert got["position_ids"].shape == got["input_ids"].shape
    assert ref_widths[0] == 1 < ref_widths[1]  # rank 0 alone stops after one token
    assert widths == [ref_widths[1]] * 2  # both ranks return rank 1's width


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_greedy_equals_transformers_generate(kind):
    """Greedy tokens equal ``model.generate`` (transformers' own loop) on left-padded prompts."""
    model = make_model(kind, seed=3)
    ids, mask, pos = left_padded([6, 2, 5, 4], seed=6)
    new = 10
    ref = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=new,
        min_new_tokens=new,
        eos_token_id=None,
        pad_token_id=PAD,
    )[:, ids.shape[1] :]
    got = native_generate(
        model, ids, mask, pos, SamplingParams(response_length=new, do_sample=False), [], PAD
    )
    assert torch.equal(got["responses"], ref)


@pytest.mark.parametrize("top_k,top_p,temp", [(-1, 1.0, 1.0), (-1, 1.0, 0.7), (5, 1.0, 1.0), (-1, 0.9, 0.8)])
def test_sample_next_inplace_matches_copying_path_and_leaves_input_alone(top_k, top_p, temp):
    logits = torch.randn(16, 40, generator=torch.Generator().manual_seed(0)) * 3
    params = SamplingParams(response_length=1, temperature=temp, top_k=top_k, top_p=top_p)
    before = logits.clone()
    a = sample_next(logits, params, torch.Generator().manual_seed(1), want_log_probs=True)
    assert torch.equal(logits, before)  # the default path must not touch the caller's logits
    b = sample_next(
        logits.clone(), params, torch.Generator().manual_seed(1), want_log_probs=True, inplace=True
    )
    assert torch.equal(a[0], b[0])
    torch.testing.assert_close(a[1], b[1])
    # log-probs are the unfiltered log_softmax at the chosen tokens
    torch.testing.assert_close(
        a[1], torch.log_softmax(before / temp, -1).gather(-1, a[0][:, None]).squeeze(-1)
    )


def test_seeded_sampling_is_reproducible():
    model = make_model("qwen2", seed=4)
    ids, mask, pos = left_padded([5, 3, 6, 2], seed=7)
    params = SamplingParams(response_length=8, temperature=0.9)
    runs = [
        native_generate(model, ids, mask, pos, params, [EOS], PAD, True, torch.Generator().manual_seed(s))
        for s in (11, 11, 12)
    ]
    assert_same_generation(runs[0], runs[1], atol=0)
    assert not torch.equal(runs[0]["responses"], runs[2]["responses"])


@pytest.fixture
def compile_graphs(monkeypatch):
    """Compiled decode steps on ``aot_eager`` (dynamo's graphs without a kernel build: graph counts are
    the same as inductor's) with fresh caches; returns the count of graphs compiled so far."""
    from torch._dynamo.utils import counters
    from verl.workers.engine import compile as engine_compile

    monkeypatch.setattr(engine_compile, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    counters.clear()
    yield lambda: int(counters["stats"]["unique_graphs"])
    torch._dynamo.reset()


@pytest.mark.parametrize("kind", ["qwen2", "llama", "qwen3"])
def test_compiled_decode_equals_eager_and_compiles_once(kind, compile_graphs):
    """Greedy tokens and log-probs of the compiled step equal the eager step's (rows leave the batch at
    different steps, so the row count changes), and generations of other prompt widths, lengths and
    row counts reuse the two compiled regions (pre- and post-attention, shared by every layer): at most
    one graph per region for two rows or more, and one more each once a single row is left (dynamo
    specialises sizes 0 and 1)."""
    model = make_model(kind, seed=2)
    ids, mask, pos = left_padded([5, 3, 7, 1, 6, 2, 4, 7])
    params = SamplingParams(response_length=12, do_sample=False)
    free = generate_tokens(model, ids, mask, pos, params, [], PAD)["responses"]
    eos = sorted({int(free[0, 1]), int(free[3, 4]), int(free[5, 0])})
    ref = native_generate(model, ids, mask, pos, params, eos, PAD, calculate_log_probs=True)
    got = native_generate(model, ids, mask, pos, params, eos, PAD, calculate_log_probs=True, compiled=True)
    assert ref["response_mask"].sum(-1).min() < ref["response_mask"].sum(-1).max()
    assert_same_generation(got, ref)
    assert 2 <= compile_graphs() <= 4
    for lengths, new in (([4, 9, 2, 6, 8], 7), ([3, 3, 5, 2, 6, 4, 1], 15)):
        ids, mask, pos = left_padded(lengths, seed=len(lengths))
        p = SamplingParams(response_length=new, do_sample=False)
        assert_same_generation(
            native_generate(model, ids, mask, pos, p, eos, PAD, True, compiled=True),
            native_generate(model, ids, mask, pos, p, eos, PAD, True),
        )
    assert compile_graphs() <= 4


@pytest.mark.slow
def test_inductor_decode_greedy_equals_transformers_generate():
    """The compiled step with inductor's kernels gives the eager step's and ``model.generate``'s greedy
    tokens, and log-probs equal to the eager step's up to float rounding."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = make_model("qwen2", seed=3)
    ids, mask, pos = left_padded([6, 2, 5, 4], seed=6)
    new = 10
    ref = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new,
                         min_new_tokens=new, eos_token_id=None, pad_token_id=PAD)[:, ids.shape[1]:]
    params = SamplingParams(response_length=new, do_sample=False)
    got = native_generate(model, ids, mask, pos, params, [], PAD, calculate_log_probs=True, compiled=True)
    eager = native_generate(model, ids, mask, pos, params, [], PAD, calculate_log_probs=True)
    assert torch.equal(got["responses"], ref) and torch.equal(eager["responses"], ref)
    assert_same_generation(got, eager)
    assert int(counters["stats"]["unique_graphs"]) == 2
    torch._dynamo.reset()
