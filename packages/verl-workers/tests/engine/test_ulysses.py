"""Ulysses sequence parallelism: the all-to-all primitive, and SP=2 (2 gloo processes) against SP=1
on a real tiny Qwen2 (4 heads, 2 KV heads): log-probs, entropies, values and gradients."""

import os

import pytest
import torch
from verl.workers.engine.testing import actor_engine, make_rl_batch, run_gloo

_MODEL = (
    "actor_rollout_ref.model.enable_gradient_checkpointing={gc}",
    "actor_rollout_ref.model.use_remove_padding=true",
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.actor.entropy_coeff=0.01",
)


def _actor(model_dir, sp, *extra, gc=False):
    from verl.trainer.config import load_config
    from verl.workers.actor import DataParallelPPOActor

    cfg = load_config(
        [f"actor_rollout_ref.model.path={model_dir}", *(k.format(gc=gc) for k in _MODEL), *extra],
    )
    arr = cfg.actor_rollout_ref
    options = {"ulysses_sequence_parallel_size": sp} if sp > 1 else {}
    engine = actor_engine(arr, 10, grad_clip=arr.actor.grad_clip, **options)
    return DataParallelPPOActor(arr.actor, engine, ppo_mini_batch_size_per_rank=8)


def _critic(model_dir, sp):
    from verl.trainer.config import load_config
    from verl.workers.critic import DataParallelPPOCritic
    from verl.workers.engine import build_engine

    cfg = load_config(
        [
            f"critic.model.path={model_dir}",
            "critic.model.use_remove_padding=true",
            "critic.model.enable_gradient_checkpointing=false",
            "critic.ppo_micro_batch_size_per_gpu=4",
        ],
    )
    options = {"ulysses_sequence_parallel_size": sp} if sp > 1 else {}
    engine = build_engine(
        "fsdp2",
        model_config=cfg.critic.model,
        engine_config=cfg.critic.model.fsdp_config,
        optim_config=cfg.critic.optim,
        model_type="value",
        total_training_steps=10,
        **options,
    )
    return DataParallelPPOCritic(cfg.critic, engine, ppo_mini_batch_size_per_rank=8)


def _grad_loss(out, mb):
    """A loss that reaches every output: weighted log-probs and entropies over the response tokens."""
    mask = mb["response_mask"].float()
    w = torch.linspace(-1.0, 1.0, mask.numel()).view_as(mask)
    loss = (out["log_probs"] * w * mask).sum() + 0.3 * (out["entropys"] * mask).sum()
    return loss, {}


def _full_grads(module):
    from torch.distributed.tensor import DTensor

    return {
        n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).detach().clone()
        for n, p in module.named_parameters()
    }


def _outputs(actor, critic, data):
    log_probs, entropys = actor.compute_log_prob(data, calculate_entropy=True)
    actor.engine.forward_backward([data.batch], _grad_loss, calculate_entropy=True)
    grads = _full_grads(actor.engine.module)
    actor.engine.optimizer.zero_grad(set_to_none=True)
    values = critic.compute_values(data)
    return {"log_probs": log_probs, "entropys": entropys, "grads": grads, "values": values}


def _data():
    return make_rl_batch(n=8, prompt_len=9, response_len=7, vocab=60, seed=5)


def _sp_job(rank, world, model_dir, value_dir, out_dir, gc):
    actor = _actor(model_dir, world, gc=gc)
    critic = _critic(value_dir, world)
    assert actor.engine.dp_size == 1 and actor.engine.dp_rank == 0
    result = _outputs(actor, critic, _data())
    result["metrics"] = actor.update_policy(_data())
    torch.save(result, os.path.join(out_dir, f"sp_rank{rank}.pt"))


@pytest.mark.slow
def test_sp2_matches_sp1(dist_world1, tiny_model_dir, tiny_value_model_dir, tmp_path):
    """With gradient checkpointing, so the backward's recomputed forward runs the all-to-alls too (the
    same check without it passed too; one spawn is kept for CI time)."""
    gc = True
    run_gloo(_sp_job, 2, str(tmp_path), tiny_model_dir, tiny_value_model_dir, str(tmp_path), gc)
    ranks = [torch.load(tmp_path / f"sp_rank{r}.pt", weights_only=False) for r in range(2)]
    ref = _outputs(_actor(tiny_model_dir, 1, gc=gc), _critic(tiny_value_model_dir, 1), _data())
    ref["metrics"] = _actor(tiny_model_dir, 1, gc=gc).update_policy(_data())
    mask = _data().batch["response_mask"].bool()
    for got in ranks:  # both ranks of the SP group hold the whole result
        for key in ("log_probs", "entropys", "values"):
            torch.testing.assert_close(got[key][mask], ref[key][mask], atol=2e-5, rtol=1e-5)
        assert got["grads"].keys() == ref["grads"].keys()
        for name, g in ref["grads"].items():
            torch.testing.assert_close(
                got["grads"][name], g, atol=2e-5, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}"
            )
        for key, value in ref["metrics"].items():
            assert got["metrics"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def _a2a_job(rank, world, out_dir):
    import torch.distributed as dist
    from verl.workers.engine.ulysses import all_to_all, gather_sequence

    group = dist.new_group(list(range(world)))
    g = torch.Generator().manual_seed(0)
    full = torch.randn(2, 4, 6, 3, generator=g)  # [B, heads, S, D], the same on every rank
    local = full.chunk(world, dim=2)[rank].clone().requires_grad_()
    heads = all_to_all(local, group, scatter_dim=1, gather_dim=2)  # -> [B, heads/world, S, D]
    back = all_to_all(heads, group, scatter_dim=2, gather_dim=1)
    weight = torch.arange(heads.numel(), dtype=torch.float32).view_as(heads)
    (heads * weight).sum().backward()
    gathered = gather_sequence(local.detach(), group, dim=2)
    torch.save(
        {
            "heads": heads.detach(),
            "back": back.detach(),
            "local": local.detach(),
            "grad": local.grad,
            "gathered": gathered,
            "full": full,
        },
        os.path.join(out_dir, f"a2a{rank}.pt"),
    )


def test_all_to_all_trades_sequence_for_heads(tmp_path):
    run_gloo(_a2a_job, 2, str(tmp_path), str(tmp_path))
    r = [torch.load(tmp_path / f"a2a{i}.pt") for i in range(2)]
    full = r[0]["full"]
    for i in range(2):
        # rank i: heads [2i, 2i+2) over the whole sequence; the reverse all-to-all restores its slice
        torch.testing.assert_close(r[i]["heads"], full[:, 2 * i : 2 * i + 2])
        torch.testing.assert_close(r[i]["back"], r[i]["local"])
        torch.testing.assert_close(r[i]["gathered"], full)
    # backward: d/d(local) of sum(heads_i * w_i) routes each w_i entry back to the rank owning that token
    weights = [
        torch.arange(r[i]["heads"].numel(), dtype=torch.float32).view_as(r[i]["heads"]) for i in range(2)
    ]
    full_grad = torch.cat(weights, dim=1)  # [B, heads, S, D]: the weight every element of `full` got
    for i in range(2):
        torch.testing.assert_close(r[i]["grad"], full_grad.chunk(2, dim=2)[i])
