import os
import shutil

import pytest
import torch
from verl.workers.checkpoint import is_complete_checkpoint, read_meta
from verl.workers.critic import DataParallelPPOCritic
from verl.workers.engine import build_engine


def _critic(ppo_config, path):
    cfg = ppo_config(f"actor_rollout_ref.model.path={path}", "critic.model.enable_gradient_checkpointing=false",
                     "critic.optim.lr=1e-3", "critic.optim.lr_scheduler_type=cosine", "critic.ppo_micro_batch_size_per_gpu=4")
    c = cfg.critic
    engine = build_engine(c.strategy, model_config=c.model, engine_config=c.model.fsdp_config,
                          optim_config=c.optim, model_type="value", grad_clip=c.grad_clip, total_training_steps=5)
    return DataParallelPPOCritic(c, engine, ppo_mini_batch_size_per_rank=4)


def test_save_reload_continue_identically(dist_world1, tiny_value_model_dir, ppo_config, make_rl_batch, tmp_path):
    data1, data2 = make_rl_batch(n=8, seed=31), make_rl_batch(n=8, seed=32)
    a = _critic(ppo_config, tiny_value_model_dir)
    a.update_critic(data1)
    ckpt = str(tmp_path / "global_step_1" / "critic")
    a.engine.save_checkpoint(ckpt, global_step=1)
    assert is_complete_checkpoint(ckpt) and read_meta(ckpt)["global_step"] == 1
    torch.manual_seed(1234)  # RNG state after the save must be restored by the load
    rng_after_save = torch.get_rng_state()
    metrics_a = a.update_critic(data2)
    state_a = a.engine.full_state_dict()

    b = _critic(ppo_config, tiny_value_model_dir)
    torch.manual_seed(999)
    b.engine.load_checkpoint(ckpt)
    assert not torch.equal(torch.get_rng_state(), rng_after_save)  # restored to the state at save time
    metrics_b = b.update_critic(data2)
    state_b = b.engine.full_state_dict()
    assert metrics_b == metrics_a  # same lr (scheduler restored), same loss, same grad norm
    for k in state_a:
        assert torch.equal(state_a[k], state_b[k]), k


def test_half_written_checkpoint_is_detected(dist_world1, tiny_value_model_dir, ppo_config, tmp_path):
    a = _critic(ppo_config, tiny_value_model_dir)
    ckpt = str(tmp_path / "ckpt")
    a.engine.save_checkpoint(ckpt)
    os.remove(os.path.join(ckpt, "checkpoint_meta.json"))  # as if the run died before the marker
    assert not is_complete_checkpoint(ckpt)
    with pytest.raises(RuntimeError, match="incomplete"):
        a.engine.load_checkpoint(ckpt)
    shutil.rmtree(ckpt)
    with pytest.raises(FileNotFoundError, match="no checkpoint folder"):
        a.engine.load_checkpoint(ckpt)


def test_save_contents_hf_model_and_load_contents(dist_world1, tiny_value_model_dir, ppo_config, tmp_path):
    from omegaconf import OmegaConf
    from transformers import AutoModelForTokenClassification

    a = _critic(ppo_config, tiny_value_model_dir)
    a.engine.checkpoint_config = OmegaConf.create({"save_contents": ["model", "hf_model"],
                                                  "load_contents": ["model", "optimizer", "extra"]})
    ckpt = str(tmp_path / "ckpt")
    a.engine.save_checkpoint(ckpt)
    assert read_meta(ckpt)["contents"] == ["hf_model", "model"]
    assert not os.path.exists(os.path.join(ckpt, "extra_state_rank_0.pt"))
    hf = AutoModelForTokenClassification.from_pretrained(os.path.join(ckpt, "huggingface"))
    sd = a.engine.full_state_dict()
    for k, v in hf.state_dict().items():
        assert torch.equal(v, sd[k]), k
    with pytest.raises(ValueError, match=r"asks for \['extra', 'optimizer'\]"):
        a.engine.load_checkpoint(ckpt)
    a.engine.checkpoint_config = OmegaConf.create({"save_contents": ["model"], "load_contents": ["model"]})
    a.engine.load_checkpoint(ckpt)  # model only: fine


def test_resume_with_more_total_steps_follows_the_new_schedule_from_its_first_step(
        dist_world1, tiny_value_model_dir, ppo_config, make_rl_batch, tmp_path):
    """A run resumed with a larger total_training_steps (allowed) must train its first step at the new
    schedule's rate. The optimizer's saved lr is the old schedule's: with cosine to 0 over 2 steps the
    resumed step trained at lr 0 (found by the chaos suite) before the load recomputed it."""
    from verl.workers.engine.optim import lr_factor

    def critic(total):
        cfg = ppo_config(f"actor_rollout_ref.model.path={tiny_value_model_dir}",
                         "critic.model.enable_gradient_checkpointing=false", "critic.optim.lr=1e-3",
                         "critic.optim.lr_warmup_steps=1", "critic.optim.lr_scheduler_type=cosine",
                         "critic.ppo_micro_batch_size_per_gpu=4")
        c = cfg.critic
        engine = build_engine(c.strategy, model_config=c.model, engine_config=c.model.fsdp_config,
                              optim_config=c.optim, model_type="value", grad_clip=c.grad_clip,
                              total_training_steps=total)
        return DataParallelPPOCritic(c, engine, ppo_mini_batch_size_per_rank=4), c.optim

    a, optim = critic(total=2)
    for seed in (31, 32):
        a.update_critic(make_rl_batch(n=8, seed=seed))
    assert a.engine.get_lr() == 0.0  # the end of a 2-step cosine
    ckpt = str(tmp_path / "critic")
    a.engine.save_checkpoint(ckpt, global_step=2)
    b, _ = critic(total=6)
    b.engine.load_checkpoint(ckpt)
    expected = 1e-3 * lr_factor(2, optim, 6)
    assert expected > 0 and b.engine.get_lr() == pytest.approx(expected)
    assert b.engine.lr_scheduler.get_last_lr() == [pytest.approx(expected)]
    assert b.update_critic(make_rl_batch(n=8, seed=33))["critic/lr"] == pytest.approx(expected)
    # the same total: the saved rate exactly
    c, _ = critic(total=2)
    c.engine.load_checkpoint(ckpt)
    assert c.engine.get_lr() == 0.0


def test_truncated_or_missing_shard_is_refused_naming_the_file(dist_world1, tiny_value_model_dir, ppo_config, tmp_path):
    a = _critic(ppo_config, tiny_value_model_dir)
    ckpt = tmp_path / "ckpt"
    a.engine.save_checkpoint(str(ckpt))
    shard = next(p for p in sorted((ckpt / "model_optim").iterdir()) if p.suffix == ".distcp")
    size = shard.stat().st_size
    os.truncate(shard, size - 1)
    with pytest.raises(ValueError, match=rf"{shard} is truncated: {size - 1} bytes"):
        a.engine.load_checkpoint(str(ckpt))
    os.remove(shard)
    with pytest.raises(FileNotFoundError, match=rf"checkpoint shard {shard} is missing"):
        a.engine.load_checkpoint(str(ckpt))


def test_save_errors_in_the_users_terms(tmp_path):
    import errno

    from verl.workers.checkpoint.dcp import _save_error

    full = _save_error(str(tmp_path / "global_step_3" / "actor"), OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(full, OSError) and full.errno == errno.ENOSPC
    assert "while writing checkpoint" in str(full) and "global_step_3" in str(full) and "previous one" in str(full)
    other = _save_error(str(tmp_path / "x"), RuntimeError("line 1\nboom"))
    assert isinstance(other, RuntimeError) and str(other) == f"writing checkpoint {tmp_path / 'x'} failed: RuntimeError: boom"
