"""``actor.use_torch_compile``: compiled decoder layers and decode steps give the eager numbers, and the
number of compilations stays bounded over steps of changing lengths (torch._dynamo's counters).

Graph counts are backend-independent, so the counting tests compile with ``aot_eager`` (dynamo's
graphs and AOTAutograd's forward/backward split, no kernel build); one test per path builds the real
inductor kernels (``slow``: about a minute of C++ compilation on 2 cores).
"""

import pytest
import torch
from verl.workers.engine import compile as engine_compile
from verl.workers.engine.compile import resolve_compile
from verl.workers.engine.testing import make_rl_batch


@pytest.fixture
def graphs(monkeypatch):
    """Fresh dynamo caches and counters; returns a function giving the graphs compiled so far."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield lambda: int(counters["stats"]["unique_graphs"])
    torch._dynamo.reset()


@pytest.fixture
def aot_eager(monkeypatch):
    monkeypatch.setattr(engine_compile, "BACKEND", "aot_eager")


def _engine(model_dir, *extra, **options):
    from verl.trainer.config import load_config
    from verl.workers.engine import build_engine

    cfg = load_config([
        f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        *extra,
    ])
    arr = cfg.actor_rollout_ref
    return build_engine("fsdp2", model_config=arr.model, engine_config=arr.actor.fsdp_config,
                        optim_config=arr.actor.optim, total_training_steps=4, **options)


def _loss(out, mb):
    mask = mb["response_mask"].float()
    w = torch.linspace(-1.0, 1.0, mask.numel()).view_as(mask)
    return (out["log_probs"] * w * mask).sum(), {}


def _steps(engine, batches):
    """Per batch: no-grad log-probs, then log-probs with autograd and the gradients of a loss on them."""
    results = []
    for data in batches:
        infer = engine.infer([data.batch])["log_probs"]
        engine.forward_backward([data.batch], _loss)
        grads = {n: p.grad.clone() for n, p in engine.module.named_parameters()}
        engine.optimizer.zero_grad(set_to_none=True)
        results.append((infer, grads))
    return results


# steps of changing shapes: prompt/response widths and rows all move
BATCHES = [dict(n=6, prompt_len=5, response_len=4, seed=1), dict(n=4, prompt_len=7, response_len=9, seed=2),
           dict(n=8, prompt_len=3, response_len=6, seed=3), dict(n=5, prompt_len=6, response_len=12, seed=4)]


def _assert_close(compiled, eager, batches, atol, rtol):
    for (lp_c, g_c), (lp_e, g_e), data in zip(compiled, eager, batches):
        mask = data.batch["response_mask"].bool()
        torch.testing.assert_close(lp_c[mask], lp_e[mask], atol=atol, rtol=rtol)
        assert g_c.keys() == g_e.keys()
        for name in g_c:
            torch.testing.assert_close(g_c[name], g_e[name], atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_compiled_layers_match_eager_and_compile_once_per_variant(dist_world1, tiny_model_dir, graphs, aot_eager,
                                                                  dtype):
    precision = f"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype={dtype}"
    batches = [make_rl_batch(vocab=60, **b) for b in BATCHES]
    eager = _steps(_engine(tiny_model_dir, precision, use_torch_compile=False), batches)
    assert graphs() == 0
    engine = _engine(tiny_model_dir, precision, use_torch_compile=True)
    assert engine.compiled and len(engine.compiled_layers) == engine.hf_config.num_hidden_layers == 2
    compiled = _steps(engine, batches[:1])
    # one graph per variant, shared by both layers and every shape: the decoder layer and the log-prob
    # function, each with and without autograd (train, infer); the padding mask is always there
    assert graphs() == 4
    compiled += _steps(engine, batches[1:])
    assert graphs() == 4  # three more steps, every width and row count new: no recompilation
    atol, rtol = (1e-5, 1e-5) if dtype == "fp32" else (1e-2, 1e-2)
    _assert_close(compiled, eager, batches, atol, rtol)


@pytest.mark.slow
def test_inductor_layers_match_eager(dist_world1, tiny_model_dir, graphs):
    batches = [make_rl_batch(vocab=60, **b) for b in BATCHES[:3]]
    fp32 = "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32"
    eager = _steps(_engine(tiny_model_dir, fp32, use_torch_compile=False), batches)
    compiled = _steps(_engine(tiny_model_dir, fp32, use_torch_compile=True), batches)
    assert graphs() == 4
    _assert_close(compiled, eager, batches, atol=2e-5, rtol=1e-4)


def test_explicit_true_is_refused_where_it_cannot_run(monkeypatch):
    monkeypatch.setattr(engine_compile, "inductor_unavailable", lambda device_type: None)
    with pytest.raises(ValueError, match=r"use_torch_compile=true cannot be honoured: strategy 'fsdp' "):
        resolve_compile(True, device_type="cpu", strategy="fsdp")
    with pytest.raises(ValueError, match=r"ulysses_sequence_parallel_size=2 .*; LoRA"):
        resolve_compile(True, device_type="cpu", strategy="fsdp2", sp_size=2, lora=True)
    monkeypatch.setattr(engine_compile, "inductor_unavailable", lambda device_type: "no C++ compiler")
    with pytest.raises(ValueError, match=r"honoured: no C\+\+ compiler\. Set it to false"):
        resolve_compile(True, device_type="cpu", strategy="fsdp2")
    assert resolve_compile(None, device_type="cpu", strategy="fsdp2", param_tokens=1e20) == (
        False, "use_torch_compile=null: off, no C++ compiler"
    )


def test_null_compiles_runs_whose_work_repays_the_compile(monkeypatch):
    monkeypatch.setattr(engine_compile, "inductor_unavailable", lambda device_type: None)
    # the GRPO benchmark's s cell as a 7-step run: 7 x 64 rows x 68 tokens x 4.2M parameters
    small = 7 * 64 * 68 * 4.2e6
    on, why = resolve_compile(None, device_type="cpu", strategy="fsdp2", param_tokens=small)
    assert not on and "(1.3e+11) are under 1e+13" in why
    # a 0.5B model, 200 steps of 256 rows x 1024 tokens
    on, why = resolve_compile(None, device_type="cpu", strategy="fsdp2", param_tokens=200 * 256 * 1024 * 5e8)
    assert on and why.startswith("use_torch_compile=null: on")
    assert not resolve_compile(None, device_type="cuda", strategy="fsdp2", param_tokens=1e14)[0]
    assert not resolve_compile(None, device_type="cpu", strategy="fsdp2", param_tokens=None)[0]
    assert resolve_compile(False, device_type="cpu", strategy="fsdp2", param_tokens=1e20) == (
        False, "use_torch_compile=false"
    )


def test_engine_reports_its_decision(dist_world1, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(engine_compile, "inductor_unavailable", lambda device_type: None)
    engine = _engine(tiny_model_dir, use_torch_compile=None, run_tokens=100)
    assert not engine.compiled and engine.compiled_layers == []
    assert "are under 1e+13" in engine.compile_reason
