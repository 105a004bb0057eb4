"""``model.use_fused_kernels``, ``actor.use_torch_compile`` and ``model.use_liger`` in the FSDP engine:
the fused and compiled paths give the unfused values and gradients on a real tiny Qwen2."""

import pytest
import torch
from verl.workers.engine.testing import actor_engine, make_rl_batch


def _engine(model_dir, *extra, **options):
    from verl.trainer.config import load_config

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            *extra,
        ],
    )
    arr = cfg.actor_rollout_ref
    return actor_engine(arr, 2, **options)


def _loss(out, mb):
    mask = mb["response_mask"].float()
    w = torch.linspace(-1.0, 1.0, mask.numel()).view_as(mask)
    return (out["log_probs"] * w * mask).sum() + 0.3 * (out["entropys"] * mask).sum(), {}


def _run(engine, data, temperature):
    out = engine.infer([data.batch], temperature=temperature, calculate_entropy=True)
    engine.forward_backward([data.batch], _loss, temperature=temperature, calculate_entropy=True)
    grads = {n: p.grad.clone() for n, p in engine.module.named_parameters()}
    engine.optimizer.zero_grad(set_to_none=True)
    return out, grads


def _assert_same(a, b, mask, atol=2e-5):
    (out_a, grads_a), (out_b, grads_b) = a, b
    for key in ("log_probs", "entropys"):
        torch.testing.assert_close(out_a[key][mask], out_b[key][mask], atol=atol, rtol=1e-5)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(
            grads_a[name], grads_b[name], atol=atol, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.mark.parametrize("packed", [False, True])
def test_fused_kernels_match_unfused(dist_world1, tiny_model_dir, packed):
    data = make_rl_batch(n=6, prompt_len=7, response_len=6, vocab=60, seed=3)
    mask = data.batch["response_mask"].bool()
    extra = ("actor_rollout_ref.model.use_remove_padding=true",) if packed else ()
    plain = _run(_engine(tiny_model_dir, *extra), data, 0.7)
    fused_engine = _engine(tiny_model_dir, "actor_rollout_ref.model.use_fused_kernels=true", *extra)
    fused = _run(fused_engine, data, 0.7)
    _assert_same(fused, plain, mask)
    # the module still generates through its ordinary forward (the hf rollout shares it)
    logits = fused_engine.module(input_ids=data.batch["input_ids"][:1]).logits
    assert logits.shape[-1] == fused_engine.hf_config.vocab_size


def test_torch_compile_wraps_the_log_prob_and_entropy_functions(dist_world1, tiny_model_dir, monkeypatch):
    """Wiring only: a real inductor compile of these functions took ~2 minutes on the 2-core CI machine,
    so ``torch.compile`` is replaced by a recorder that returns the function (the values must not move).
    The decoder layers compiled by the same switch: tests/engine/test_compile.py."""
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
    from verl.workers.engine import hf_model

    compiled = []

    def fake_compile(fn, **kwargs):
        compiled.append((fn, kwargs))
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    hf_model._compiled.cache_clear()
    try:
        data = make_rl_batch(n=4, prompt_len=5, response_len=4, vocab=60, seed=4)
        mask = data.batch["response_mask"].bool()
        plain = _run(_engine(tiny_model_dir), data, 1.0)
        assert compiled == []
        engine = _engine(tiny_model_dir, use_torch_compile=True)
        layer_forwards = [fn for fn, _ in compiled]
        assert layer_forwards == [layer.forward for layer in engine.compiled_layers]
        assert all(kw == {"backend": "inductor"} for _, kw in compiled)
        del compiled[:]
        _assert_same(_run(engine, data, 1.0), plain, mask)
        assert [fn for fn, _ in compiled] == [logprobs_from_logits, entropy_from_logits]
        assert all(kw == {"dynamic": True, "backend": "inductor"} for _, kw in compiled)
    finally:
        hf_model._compiled.cache_clear()


def test_liger_is_refused_on_cpu(dist_world1, tiny_model_dir):
    with pytest.raises(
        ValueError,
        match="use_liger=True patches the model with Liger's Triton kernels, which need a CUDA GPU",
    ):
        _engine(tiny_model_dir, "actor_rollout_ref.model.use_liger=true")
