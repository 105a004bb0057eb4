"""``rollout.layered_summon``: the weights for the rollout gathered one decoder layer at a time, LoRA merged
per layer, equal to the whole-model gather (``hf_state_dict``), and lazy (one layer gathered per step)."""

import pytest
import torch
from verl.workers.engine.testing import actor_engine


def _engine(ppo_config, model_dir, *extra):
    arr = ppo_config(
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        *extra,
    ).actor_rollout_ref
    return actor_engine(arr, 2, grad_clip=1.0)


@pytest.mark.parametrize("lora", [True, False])
def test_layered_equals_whole_model_gather_and_is_lazy(
    dist_world1, tiny_model_dir, ppo_config, monkeypatch, lora
):
    from verl.workers.engine import layered

    extra = ("actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8") if lora else ()
    engine = _engine(ppo_config, tiny_model_dir, *extra)
    if lora:  # peft starts lora_B at zero: give the adapters a value so the merge shows
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, p in engine.module.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    whole = engine.hf_state_dict()
    gathered: list[str] = []
    real = layered._gathered
    monkeypatch.setattr(layered, "_gathered", lambda v: (gathered.append(v.shape), real(v))[1])
    stream = layered.iter_layered_hf_state(engine)
    first_name, first = next(stream)
    n_layers = engine.hf_config.num_hidden_layers
    assert first_name.startswith("model.layers.0.")
    # one layer gathered so far, not the model
    per_layer = len(gathered)
    assert 0 < per_layer < len(engine.module.state_dict()) / n_layers + 1
    rest = dict(stream)
    out = {first_name: first, **rest}
    assert sorted(out) == sorted(whole)
    for k in whole:
        torch.testing.assert_close(out[k], whole[k], atol=0, rtol=0, msg=k)
    if lora:
        assert not any("lora_" in k or "base_layer" in k for k in out)


def test_config_checks(ppo_config, tiny_model_dir):
    from verl.trainer.config import ConfigError, validate_config

    def problems(*extra):
        cfg = ppo_config(f"actor_rollout_ref.model.path={tiny_model_dir}", *extra)
        try:
            validate_config(cfg)
        except ConfigError as e:
            return "\n".join(e.problems)
        return ""

    on = "actor_rollout_ref.rollout.layered_summon=true"
    assert "is implemented for the fsdp2 engine" in problems(on, "actor_rollout_ref.actor.strategy=fsdp")
    assert "nothing is gathered here, the native rollout" in problems(on)
    lora = ("actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8")
    assert "layered_summon" not in problems(on, *lora)


def _two_rank_job(rank, world, model_dir, out_dir, lora):
    """fsdp2 over 2 gloo ranks: parameters are sharded DTensors; the layered stream must gather them to the
    same full tensors as the whole-model gather, in the same order on both ranks (a collective each)."""
    from verl.trainer.config import load_config
    from verl.workers.engine.layered import iter_layered_hf_state

    extra = ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8"] if lora else []
    arr = load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        ]
        + extra,
    ).actor_rollout_ref
    torch.manual_seed(0)  # peft's lora_A init: the same on both ranks
    engine = actor_engine(arr, 2, grad_clip=1.0)
    from torch.distributed.tensor import DTensor

    sharded = any(isinstance(p, DTensor) for p in engine.module.parameters())
    whole = engine.hf_state_dict()
    layered = dict(iter_layered_hf_state(engine))
    same = sorted(whole) == sorted(layered) and all(torch.equal(whole[k], layered[k]) for k in whole)
    torch.save({"sharded": sharded, "same": same, "n": len(whole)}, f"{out_dir}/layered{rank}.pt")


@pytest.mark.slow
def test_layered_gather_over_two_fsdp2_ranks(tiny_model_dir, tmp_path):
    from verl.workers.engine.testing import run_gloo

    # LoRA: the DTensor gather and the per-layer merge (one spawn, for CI time; the plain path differs
    # only by the merge and is checked on one rank above)
    run_gloo(_two_rank_job, 2, str(tmp_path), tiny_model_dir, str(tmp_path), True)
    results = [torch.load(tmp_path / f"layered{r}.pt") for r in range(2)]
    assert all(r["sharded"] for r in results)  # the DTensor path ran
    assert all(r["same"] and r["n"] > 0 for r in results), results
