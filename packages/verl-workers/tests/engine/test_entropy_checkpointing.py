"""``actor.entropy_checkpointing``: the entropy is recomputed in backward (torch.utils.checkpoint) with the
same values and gradients, and autograd keeps less for backward (the [tokens, vocab] softmax is not held)."""

import torch
from verl.utils.torch_functional import entropy_from_logits
from verl.workers.engine.hf_model import entropy_of
from verl.workers.engine.testing import actor_engine, make_rl_batch


def _saved_bytes_and_grad(logits: torch.Tensor, checkpoint: bool):
    """Bytes autograd holds for backward (every tensor packed by saved-tensor hooks, counted once per
    storage), the entropy and d(sum of weighted entropy)/d(logits)."""
    x = logits.detach().clone().requires_grad_(True)
    seen: dict[int, int] = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        ent = entropy_of(x, entropy_from_logits, checkpoint=checkpoint)
    w = torch.linspace(-1.0, 2.0, ent.numel()).view_as(ent)
    (ent * w).sum().backward()
    return sum(seen.values()), ent.detach(), x.grad


def test_checkpointed_entropy_equal_values_gradients_and_holds_less():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 16, 512, generator=g) * 3
    plain_bytes, plain_ent, plain_grad = _saved_bytes_and_grad(logits, checkpoint=False)
    ckpt_bytes, ckpt_ent, ckpt_grad = _saved_bytes_and_grad(logits, checkpoint=True)
    # independent reference: H = -sum p log p from the softmax
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(plain_ent, -(p * torch.log(p)).sum(-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ckpt_ent, plain_ent, atol=0, rtol=0)
    torch.testing.assert_close(ckpt_grad, plain_grad, atol=1e-6, rtol=1e-6)
    one = logits.numel() * 4  # one fp32 [4, 16, 512] tensor
    # unfused: at least the softmax beyond the logits is held; checkpointed: the logits alone
    assert plain_bytes >= 2 * one
    assert ckpt_bytes <= one
    # no autograd (entropy as a metric): checkpointing is skipped and the value is the same
    with torch.no_grad():
        torch.testing.assert_close(entropy_of(logits, checkpoint=True), plain_ent)


def _grads(model_dir, data, **options):
    from verl.trainer.config import load_config

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        ],
    )
    arr = cfg.actor_rollout_ref
    engine = actor_engine(arr, 2, **options)

    def loss(out, mb):
        mask = mb["response_mask"].float()
        return (out["log_probs"] * mask).sum() + 0.3 * (out["entropys"] * mask).sum(), {}

    engine.forward_backward([data.batch], loss, temperature=0.9, calculate_entropy=True)
    return engine, {n: p.grad.clone() for n, p in engine.module.named_parameters()}


def test_engine_with_entropy_checkpointing_gives_the_same_gradients(dist_world1, tiny_model_dir):
    data = make_rl_batch(n=4, prompt_len=5, response_len=4, vocab=60, seed=9)
    _, plain = _grads(tiny_model_dir, data)
    engine, ckpt = _grads(tiny_model_dir, data, entropy_checkpointing=True)
    assert engine._head.checkpoint_entropy
    assert plain.keys() == ckpt.keys()
    for name in plain:
        torch.testing.assert_close(
            ckpt[name], plain[name], atol=2e-6, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )
