"""LoRA on FSDP2 over 2 gloo ranks against the same update on 1 rank: the adapters' gradients match within
fp32 tolerance, the optimizer state exists for the adapters only and is sharded across the ranks, the
merged weights every rank would send to its rollout equal peft's ``merge_and_unload`` of the trained
adapter, and a checkpoint saved by 2 ranks (DCP shards + the peft adapter) loads on 2 ranks and on 1."""

import os

import pytest
import torch
from verl.workers.engine.testing import actor_engine, run_gloo

pytestmark = pytest.mark.slow

R, ALPHA = 4, 8


def _actor(model_dir, mini):
    from verl.trainer.config import load_config
    from verl.workers.actor import DataParallelPPOActor

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.actor.strategy=fsdp2",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            f"actor_rollout_ref.model.lora_rank={R}",
            f"actor_rollout_ref.model.lora_alpha={ALPHA}",
            "actor_rollout_ref.actor.optim.lr=2e-2",
            "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
            "actor_rollout_ref.actor.optim.weight_decay=0.0",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.actor.entropy_coeff=0.0",
            "actor_rollout_ref.actor.ppo_epochs=1",
        ],
    )
    arr = cfg.actor_rollout_ref
    torch.manual_seed(0)  # the adapters' A init (rank 0's is broadcast on 2 ranks)
    engine = actor_engine(arr, 10, grad_clip=arr.actor.grad_clip)
    return DataParallelPPOActor(arr.actor, engine, ppo_mini_batch_size_per_rank=mini)


def _full(t):
    from torch.distributed.tensor import DTensor

    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu().clone()


def _capture_grads(engine, sink):
    """Record the gradients (gathered, before clipping) of every optimizer step into ``sink``."""
    step = engine.optimizer_step

    def wrapped():
        sink.append({n: _full(p.grad) for n, p in engine.module.named_parameters() if p.grad is not None})
        return step()

    engine.optimizer_step = wrapped


def _batches():
    from verl.workers.engine.testing import make_rl_batch

    return make_rl_batch(n=8, seed=31), make_rl_batch(n=8, seed=32)


def _two_rank_job(rank, world, model_dir, out_dir):
    from torch.distributed.tensor import DTensor

    data1, data2 = _batches()
    actor = _actor(model_dir, 2)  # mini-batch of 4 trajectories = 2 per rank: two optimizer steps
    engine = actor.engine
    res = {"init": engine.full_state_dict(), "grads": []}
    _capture_grads(engine, res["grads"])
    res["metrics"] = actor.update_policy(data1.chunk(world)[rank])
    res["state"] = engine.full_state_dict()
    res["merged"] = engine.hf_state_dict()  # what this rank's rollout receives
    # the optimizer: which parameters have state, and how much of each this rank holds
    names = {id(p): n for n, p in engine.module.named_parameters()}
    res["optim"] = {
        names[id(p)]: {
            k: (tuple(v.to_local().shape), tuple(v.shape), [str(pl) for pl in v.placements])
            for k, v in st.items()
            if isinstance(v, DTensor)
        }
        for p, st in engine.optimizer.state.items()
    }
    res["trainable"] = sorted(n for n, p in engine.module.named_parameters() if p.requires_grad)
    engine.save_checkpoint(os.path.join(out_dir, "ckpt"), global_step=1)
    res["step2_metrics"] = actor.update_policy(data2.chunk(world)[rank])
    res["step2_state"] = engine.full_state_dict()
    # a fresh actor on the same 2 ranks resumes from the checkpoint and takes the same second step
    resumed = _actor(model_dir, 2)
    resumed.engine.load_checkpoint(os.path.join(out_dir, "ckpt"))
    res["loaded_state"] = resumed.engine.full_state_dict()
    res["resumed_step2_state"] = (
        resumed.update_policy(data2.chunk(world)[rank]),
        resumed.engine.full_state_dict(),
    )
    torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module")
def two_ranks(tiny_model_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("lora_two_ranks"))
    run_gloo(_two_rank_job, 2, out, tiny_model_dir, out)
    return out, [torch.load(os.path.join(out, f"rank{r}.pt"), weights_only=False) for r in range(2)]


def _as_two_ranks(data):
    """Rows reordered so one rank's mini-batches of 4 hold what two ranks' mini-batches of 2 hold."""
    return data.select_idxs([0, 1, 4, 5, 2, 3, 6, 7])


def _close(a, b, atol=2e-6, rtol=1e-4):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=rtol, msg=lambda m, k=k: f"{k}: {m}")


@pytest.fixture(scope="module")
def one_rank(dist_world1, tiny_model_dir):
    data1, data2 = _batches()
    actor = _actor(tiny_model_dir, 4)
    res = {"init": actor.engine.full_state_dict(), "grads": []}
    _capture_grads(actor.engine, res["grads"])
    res["metrics"] = actor.update_policy(_as_two_ranks(data1))
    res["state"] = actor.engine.full_state_dict()
    res["step2_metrics"] = actor.update_policy(_as_two_ranks(data2))
    res["step2_state"] = actor.engine.full_state_dict()
    return res


def test_adapter_gradients_match_one_rank(two_ranks, one_rank):
    _, (r0, r1) = two_ranks
    # both ranks started from rank 0's adapter, which is the one-rank run's (same seed)
    _close(r0["init"], one_rank["init"], atol=0, rtol=0)
    _close(r1["init"], one_rank["init"], atol=0, rtol=0)
    assert len(one_rank["grads"]) == len(r0["grads"]) == len(r1["grads"]) == 4  # two updates of two steps
    for step, want in enumerate(one_rank["grads"]):
        assert want and all(".lora_A." in k or ".lora_B." in k for k in want)  # base weights get none
        assert max(float(g.abs().max()) for g in want.values()) > 1e-4  # not a vacuous comparison
        for r in (r0, r1):
            _close(r["grads"][step], want, atol=1e-6, rtol=1e-4)
    for k in ("actor/pg_loss", "actor/grad_norm"):
        assert r0["metrics"][k] == pytest.approx(one_rank["metrics"][k], rel=1e-4, abs=1e-6)
    _close(r0["state"], one_rank["state"])
    _close(r1["state"], one_rank["state"])


def test_optimizer_state_is_adapters_only_and_sharded(two_ranks):
    _, (r0, r1) = two_ranks
    for r in (r0, r1):
        assert set(r["optim"]) == set(r["trainable"])
        assert r["trainable"] and all(".lora_A." in n or ".lora_B." in n for n in r["trainable"])
    for name, moments in r0["optim"].items():
        assert set(moments) >= {"exp_avg", "exp_avg_sq"}, name
        for key, (local0, full, placements) in moments.items():
            local1 = r1["optim"][name][key][0]
            assert placements == ["S(0)"], (name, key, placements)  # sharded along dim 0, not replicated
            # the two ranks' shards tile the full tensor: each holds its half of the rows
            assert local0[0] + local1[0] == full[0] and local0[1:] == local1[1:] == full[1:], (name, key)
            assert local0[0] == (full[0] + 1) // 2, (name, key)


def test_merged_weights_every_rank_sends_equal_peft_merge(two_ranks, tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    _, (r0, r1) = two_ranks
    # independent: peft merges the trained adapter into a freshly loaded base model
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        LoraConfig(task_type="CAUSAL_LM", r=R, lora_alpha=ALPHA, target_modules="all-linear"),
    )
    adapter = {k: v for k, v in r0["state"].items() if "lora_" in k}  # the PeftModel's own names
    missing, unexpected = peft_model.load_state_dict(adapter, strict=False)
    assert not unexpected and not [k for k in missing if "lora_" in k]
    want = peft_model.merge_and_unload().state_dict()
    want.pop("lm_head.weight")  # tied to the embeddings: sent once
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    for r in (r0, r1):
        _close(r["merged"], want, atol=1e-6, rtol=1e-6)
    key = "model.layers.0.mlp.down_proj.weight"
    assert (r0["merged"][key] - base[key]).abs().max() > 1e-5  # the adapter changed what is sent


def test_checkpoint_from_two_ranks_loads_on_two_and_on_one(two_ranks, one_rank, dist_world1, tiny_model_dir):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from verl.workers.engine.testing import make_rl_batch

    out, (r0, r1) = two_ranks
    ckpt = os.path.join(out, "ckpt")
    # on 2 ranks: the loaded state is the saved one, and the next step repeats the uninterrupted run's
    for r in (r0, r1):
        _close(r["loaded_state"], r0["state"], atol=0, rtol=0)
        metrics, state = r["resumed_step2_state"]
        _close(state, r["step2_state"], atol=0, rtol=0)
        assert metrics["actor/pg_loss"] == pytest.approx(r["step2_metrics"]["actor/pg_loss"], rel=1e-6)
    # on 1 rank: the DCP shards reshard, optimizer moments come back (same second step as 1-rank run)
    _, data2 = _batches()
    single = _actor(tiny_model_dir, 4)
    with pytest.warns(UserWarning, match="saved by 2 workers"):
        single.engine.load_checkpoint(ckpt)
    _close(single.engine.full_state_dict(), r0["state"], atol=0, rtol=0)
    single.update_policy(_as_two_ranks(data2))
    _close(single.engine.full_state_dict(), one_rank["step2_state"])
    # the adapter written by rank 0 is the gathered one, loadable by peft onto the base model
    saved = load_file(os.path.join(ckpt, "lora_adapter", "adapter_model.safetensors"))
    want = {k.replace(".default.", "."): v for k, v in r0["state"].items() if "lora_" in k}
    _close(saved, want, atol=0, rtol=0)
    ids = make_rl_batch(n=4, seed=5).batch["input_ids"]
    with torch.no_grad():
        loaded = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(tiny_model_dir), os.path.join(ckpt, "lora_adapter")
        )
        plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        plain.load_state_dict(r0["merged"], strict=False)
        torch.testing.assert_close(
            loaded(input_ids=ids).logits, plain(input_ids=ids).logits, rtol=1e-5, atol=1e-5
        )
