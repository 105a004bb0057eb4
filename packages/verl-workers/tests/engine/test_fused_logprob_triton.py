"""``fused_kernel_options.impl_backend=triton``: the Triton row kernels give the torch backend's log-probs,
entropies and gradients. Triton compiles for CUDA; ``TRITON_INTERPRET=1`` runs the same kernels on CPU
tensors, which is how they are checked here (in a pytest process started with it set)."""

import os
import subprocess
import sys

import pytest
import torch
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

pytest.importorskip("triton")


INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
needs_interpreter = pytest.mark.skipif(not INTERPRETED, reason="run by test_kernels_under_the_interpreter")


@pytest.mark.slow
def test_kernels_under_the_interpreter():
    """Triton reads TRITON_INTERPRET when it is imported, so the kernel tests run in a pytest of their own
    with it set (this process may have imported triton through torch already)."""
    if INTERPRETED:
        pytest.skip("already interpreted")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            __file__,
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "-k",
            "not under_the",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert "5 passed" in proc.stdout, tail


@pytest.mark.parametrize(
    "vocab, chunk, with_entropy_grad", [(301, 7, True), (2500, 64, True), (301, 16, False)]
)
@needs_interpreter
def test_triton_backend_matches_unfused(vocab, chunk, with_entropy_grad):
    from verl.workers.engine.fused_logprob import fused_log_prob_entropy

    g = torch.Generator().manual_seed(0)
    tokens, hidden_size, temperature = 23, 16, 0.7  # 2500 > BLOCK_V: several vocabulary blocks per row
    hidden = torch.randn(2, tokens, hidden_size, generator=g)
    weight = torch.randn(vocab, hidden_size, generator=g) * 0.5
    labels = torch.randint(0, vocab, (2, tokens), generator=g)
    w_lp, w_ent = torch.randn(2, tokens, generator=g), torch.randn(2, tokens, generator=g)

    h1, W1 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = fused_log_prob_entropy(h1, W1, labels, temperature, chunk_size=chunk, backend="triton")
    loss = (lp * w_lp).sum() + ((ent * w_ent).sum() if with_entropy_grad else 0.0)
    loss.backward()

    h2, W2 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    logits = (h2 @ W2.t()).float() / temperature
    ref_lp, ref_ent = logprobs_from_logits(logits, labels), entropy_from_logits(logits)
    ((ref_lp * w_lp).sum() + ((ref_ent * w_ent).sum() if with_entropy_grad else 0.0)).backward()

    torch.testing.assert_close(lp, ref_lp, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent.detach(), atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(h1.grad, h2.grad, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(W1.grad, W2.grad, atol=2e-5, rtol=1e-4)


def test_bad_backend_and_dtype_are_refused():
    from verl.workers.engine.fused_logprob import fused_log_prob_entropy

    h, w, y = torch.zeros(2, 4), torch.zeros(5, 4), torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="impl_backend='cuda'; known: torch, triton"):
        fused_log_prob_entropy(h, w, y, backend="cuda")
    with pytest.raises(ValueError, match="impl_backend=triton computes in fp32"):
        fused_log_prob_entropy(h.double(), w.double(), y, backend="triton")


@needs_interpreter
def test_engine_with_triton_backend_gives_the_torch_gradients(dist_world1, tiny_model_dir):
    from verl.trainer.config import load_config
    from verl.workers.engine.testing import actor_engine, make_rl_batch

    data = make_rl_batch(n=4, prompt_len=5, response_len=4, vocab=60, seed=5)

    def grads(backend):
        arr = load_config(
            [
                f"actor_rollout_ref.model.path={tiny_model_dir}",
                "actor_rollout_ref.model.enable_gradient_checkpointing=false",
                "actor_rollout_ref.model.use_fused_kernels=true",
                f"actor_rollout_ref.model.fused_kernel_options.impl_backend={backend}",
            ],
        ).actor_rollout_ref
        engine = actor_engine(arr, 2)

        def loss(out, mb):
            mask = mb["response_mask"].float()
            return (out["log_probs"] * mask).sum() + 0.3 * (out["entropys"] * mask).sum(), {}

        engine.forward_backward([data.batch], loss, temperature=0.8, calculate_entropy=True)
        return {n: p.grad.clone() for n, p in engine.module.named_parameters()}

    torch_grads, triton_grads = grads("torch"), grads("triton")
    for name in torch_grads:
        torch.testing.assert_close(triton_grads[name], torch_grads[name], atol=2e-5, rtol=1e-4, msg=name)
