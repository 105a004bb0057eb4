"""On-policy distillation in the workers, against plain Hugging Face forwards computed here: the engine's
top-k outputs, the teacher worker (top-k, sampled token, privileged context, two teachers routed by key)
and the student's update with the distillation term."""

import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl import DataProto
from verl.trainer.config import load_config
from verl.trainer.distillation.teacher_pool import teacher_init_kwargs, teacher_roles
from verl.trainer.distillation.teacher_step import compute_teacher_log_probs
from verl.trainer.ppo.distillation_losses import teacher_topk
from verl.workers.actor import DataParallelPPOActor
from verl.workers.engine import build_engine
from verl.workers.engine.hf_model import response_outputs
from verl.workers.teacher_worker import TeacherWorker


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    """A second tiny model (another seed, the same character vocabulary): the teacher."""
    from verl.workers.tiny import build_tiny_qwen2

    path = tmp_path_factory.mktemp("teacher_xs")
    build_tiny_qwen2(path, size="xs", seed=7)
    return str(path)


def _plain_logp(path, b, temperature=1.0):
    """log_softmax(logits / T) at the positions that predict the responses: [B, R, V]."""
    model = AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits
    r = b["responses"].shape[1]
    return torch.log_softmax(logits[:, -r - 1:-1] / temperature, dim=-1)


@pytest.mark.parametrize("remove_padding", [False, True])
def test_engine_top_k_and_gathered_log_probs_match_the_plain_forward(tiny_model_dir, make_rl_batch, remove_padding):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    b = make_rl_batch(n=5, prompt_len=5, response_len=4, seed=2).batch
    mask = b["response_mask"].bool()
    full = _plain_logp(tiny_model_dir, b, 0.8)
    with torch.no_grad():
        out = response_outputs(model, b, "causal_lm", temperature=0.8, topk=3, remove_padding=remove_padding)
    want_vals, want_ids = full.topk(3, dim=-1)
    torch.testing.assert_close(out["topk_log_probs"][mask], want_vals[mask], atol=1e-5, rtol=1e-5)
    assert torch.equal(out["topk_ids"][mask], want_ids[mask])
    ids = torch.randint(0, full.shape[-1], (*b["responses"].shape, 4), generator=torch.Generator().manual_seed(0))
    out = response_outputs(model, b, "causal_lm", temperature=0.8, gather_ids=ids, remove_padding=remove_padding)
    torch.testing.assert_close(out["topk_log_probs"][mask], full.gather(-1, ids)[mask], atol=1e-5, rtol=1e-5)
    assert out["topk_log_probs"].requires_grad  # the student's side trains through it


def _cfg(student, teacher, *extra):
    return load_config([
        f"actor_rollout_ref.model.path={student}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "data.train_files=x.parquet", "trainer.device=cpu", "data.max_prompt_length=8", "data.max_response_length=5",
        "distillation.enabled=true", "distillation.nnodes=1", "distillation.n_gpus_per_node=1",
        f"distillation.teacher_models.teacher_model.model_path={teacher}",
        "distillation.teacher_models.teacher_model.inference.name=hf",
        "distillation.teacher_models.teacher_model.inference.dtype=float32",
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1",
        "distillation.teacher_models.teacher_model.inference.temperature=0.9",
        "distillation.teacher_models.teacher_model.inference.max_num_seqs=3", *extra,
    ])


def _teachers(cfg):
    """The TeacherWorkers main_ppo would start, built here in-process from the same keywords."""
    topk = teacher_topk(cfg.distillation.distillation_loss)
    kwargs = teacher_init_kwargs(cfg, dict(device="cpu", seed=1), teacher_roles(cfg), topk)
    workers = {}
    for role, kw in kwargs.items():
        w = TeacherWorker(**kw)
        w.init_model()
        workers[role.name] = w
    return workers


def test_teacher_serves_its_top_k_or_the_sampled_tokens_log_prob(dist_world1, tiny_model_dir, teacher_dir,
                                                                  make_rl_batch):
    data = make_rl_batch(n=7, prompt_len=5, response_len=4, seed=3)
    mask = data.batch["response_mask"].bool()
    full = _plain_logp(teacher_dir, data.batch, 0.9)  # the teacher's temperature
    topk = _teachers(_cfg(tiny_model_dir, teacher_dir, "distillation.distillation_loss.loss_mode=forward_kl_topk",
                          "distillation.distillation_loss.topk=4"))["teacher_model"]
    out = topk.compute_teacher_log_probs(data)  # 7 rows in forwards of max_num_seqs=3
    vals, ids = full.topk(4, dim=-1)
    assert out.batch["teacher_logprobs"].shape == (7, 4, 4)
    torch.testing.assert_close(out.batch["teacher_logprobs"][mask], vals[mask], atol=1e-5, rtol=1e-5)
    assert torch.equal(out.batch["teacher_ids"][mask], ids[mask])
    k3 = _teachers(_cfg(tiny_model_dir, teacher_dir))["teacher_model"]  # loss_mode k3: the sampled token
    out = k3.compute_teacher_log_probs(data)
    sampled = full.gather(-1, data.batch["responses"][..., None])
    assert out.batch["teacher_logprobs"].shape == (7, 4, 1)
    torch.testing.assert_close(out.batch["teacher_logprobs"][mask], sampled[mask], atol=1e-5, rtol=1e-5)


def test_privileged_context_is_in_the_teachers_prompt_only(dist_world1, tiny_model_dir, teacher_dir):
    tok = AutoTokenizer.from_pretrained(teacher_dir)
    prompt = tok.apply_chat_template([{"role": "user", "content": "12+7="}], add_generation_prompt=True, tokenize=False)
    p_ids = tok.encode(prompt, add_special_tokens=False)
    r_ids = tok.encode("19", add_special_tokens=False) + [tok.eos_token_id]
    b = {"input_ids": torch.tensor([p_ids + r_ids]), "attention_mask": torch.ones(1, len(p_ids) + len(r_ids),
                                                                                    dtype=torch.long),
         "position_ids": torch.arange(len(p_ids) + len(r_ids))[None], "responses": torch.tensor([r_ids]),
         "response_mask": torch.ones(1, len(r_ids), dtype=torch.long)}
    data = DataProto.from_dict(tensors=b, non_tensors={
        "reward_model": np.array([{"ground_truth": "19"}], dtype=object)})
    teacher = _teachers(_cfg(tiny_model_dir, teacher_dir,
                             "distillation.teacher_models.teacher_model.privileged_context.key=reward_model.ground_truth",
                             "distillation.teacher_models.teacher_model.privileged_context.template='(answer {solution})'"))
    out = teacher["teacher_model"].compute_teacher_log_probs(data)
    # by hand: the teacher reads prompt + "(answer 19)" + response
    ctx = tok.encode("(answer 19)", add_special_tokens=False)
    seq = p_ids + ctx + r_ids
    plain = {"input_ids": torch.tensor([seq]), "attention_mask": torch.ones(1, len(seq), dtype=torch.long),
             "position_ids": torch.arange(len(seq))[None], "responses": torch.tensor([r_ids])}
    want = _plain_logp(teacher_dir, plain, 0.9).gather(-1, plain["responses"][..., None])
    torch.testing.assert_close(out.batch["teacher_logprobs"], want, atol=1e-5, rtol=1e-5)
    without = _plain_logp(teacher_dir, b, 0.9).gather(-1, b["responses"][..., None])
    assert not torch.allclose(out.batch["teacher_logprobs"], without, atol=1e-3)  # the context matters


def test_two_teachers_each_score_their_rows(dist_world1, tiny_model_dir, teacher_dir, make_rl_batch):
    cfg = _cfg(tiny_model_dir, teacher_dir, "distillation.n_gpus_per_node=2",
               *[f"+distillation.teacher_models.{n}.{k}" for n, path in (("a", tiny_model_dir), ("b", teacher_dir))
                 for k in (f"key={n}", f"model_path={path}", "num_replicas=1", "inference.name=hf",
                           "inference.dtype=float32", "inference.tensor_model_parallel_size=1")],
               "distillation.teacher_models.teacher_model.model_path=null")
    teachers = _teachers(cfg)
    data = make_rl_batch(n=5, prompt_len=4, response_len=3, seed=5)
    data.non_tensor_batch["data_source"] = np.array(["b", "a", "b", "b", "a"], dtype=object)
    metrics = {}
    out = compute_teacher_log_probs(data, {"a": teachers["a"], "b": teachers["b"]}, cfg.distillation, metrics)
    rollout_t = float(cfg.actor_rollout_ref.rollout.temperature)  # the mirror: the entries set no temperature
    by_model = {"a": _plain_logp(tiny_model_dir, data.batch, rollout_t), "b": _plain_logp(teacher_dir, data.batch, rollout_t)}
    mask = data.batch["response_mask"].bool()
    for i, source in enumerate(["b", "a", "b", "b", "a"]):
        want = by_model[source][i].gather(-1, data.batch["responses"][i][..., None])
        torch.testing.assert_close(out.batch["teacher_logprobs"][i][mask[i]], want[mask[i]], atol=1e-5, rtol=1e-5)
    assert metrics == {"distillation/rows/a": 2.0, "distillation/rows/b": 3.0}


def _student(cfg, mini):
    arr = cfg.actor_rollout_ref
    engine = build_engine(arr.actor.strategy, model_config=arr.model, engine_config=arr.actor.fsdp_config,
                          optim_config=arr.actor.optim, grad_clip=arr.actor.grad_clip, total_training_steps=10)
    return DataParallelPPOActor(arr.actor, engine, ppo_mini_batch_size_per_rank=mini,
                                distillation_loss=cfg.distillation.distillation_loss)


@pytest.mark.parametrize("loss_mode", ["k3", "forward_kl_topk"])
def test_student_update_reports_the_hand_computed_divergence_and_moves_toward_the_teacher(
        dist_world1, tiny_model_dir, teacher_dir, make_rl_batch, loss_mode):
    cfg = _cfg(tiny_model_dir, teacher_dir, f"distillation.distillation_loss.loss_mode={loss_mode}",
               "distillation.distillation_loss.topk=8", "distillation.distillation_loss.use_task_rewards=false",
               "distillation.teacher_models.teacher_model.inference.temperature=1.0",
               "actor_rollout_ref.actor.optim.lr=5e-3", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3")
    data = make_rl_batch(n=6, prompt_len=5, response_len=4, seed=9)
    data.batch.update(_teachers(cfg)["teacher_model"].compute_teacher_log_probs(data).batch)
    student = _plain_logp(tiny_model_dir, data.batch)
    teacher = _plain_logp(teacher_dir, data.batch)
    mask = data.batch["response_mask"].bool()
    if loss_mode == "k3":  # e^(t - s) - (t - s) - 1 on the sampled token
        s = student.gather(-1, data.batch["responses"][..., None])[..., 0]
        t = teacher.gather(-1, data.batch["responses"][..., None])[..., 0]
        per_token = torch.exp(t - s) - (t - s) - 1
    else:  # sum over the teacher's top-8 of p_T (log p_T - log p_S)
        vals, ids = teacher.topk(8, dim=-1)
        per_token = (vals.exp() * (vals - student.gather(-1, ids))).sum(-1).clamp_min(0)
    want = float(per_token[mask].mean())
    actor = _student(cfg, mini=6)
    data.batch["old_log_probs"], _ = actor.compute_log_prob(data)
    data.batch["advantages"] = torch.full_like(data.batch["advantages"], math.nan)  # must not be read
    metrics = actor.update_policy(data)
    assert metrics["distillation/loss"] == pytest.approx(want, rel=1e-4)
    assert "actor/pg_loss" not in metrics  # use_task_rewards=false: no task policy loss
    for _ in range(4):
        last = actor.update_policy(data)
    assert last["distillation/loss"] < 0.8 * want  # the student moved toward the teacher


def test_k1_as_a_reward_pulls_the_sampled_tokens_log_probs_to_the_teachers(dist_world1, tiny_model_dir, teacher_dir,
                                                                           make_rl_batch):
    # the policy-gradient variant: advantage -(log p_S - log p_T) per token; on a fixed batch the student's
    # log-prob of each sampled token moves toward the teacher's, so mean |k1| falls
    cfg = _cfg(tiny_model_dir, teacher_dir, "distillation.distillation_loss.loss_mode=k1",
               "distillation.distillation_loss.use_policy_gradient=true",
               "distillation.distillation_loss.use_task_rewards=false",
               "distillation.teacher_models.teacher_model.inference.temperature=1.0",
               "actor_rollout_ref.actor.optim.lr=5e-3", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=6")
    data = make_rl_batch(n=6, prompt_len=5, response_len=4, seed=12)
    data.batch.update(_teachers(cfg)["teacher_model"].compute_teacher_log_probs(data).batch)
    mask = data.batch["response_mask"].bool()
    t = _plain_logp(teacher_dir, data.batch).gather(-1, data.batch["responses"][..., None])[..., 0]
    s = _plain_logp(tiny_model_dir, data.batch).gather(-1, data.batch["responses"][..., None])[..., 0]
    actor = _student(cfg, mini=6)
    data.batch["old_log_probs"], _ = actor.compute_log_prob(data)
    first = actor.update_policy(data)
    # the reported term: the PPO loss with A = -(s - t) at ratio 1 is mean(s - t)
    assert first["distillation/loss"] == pytest.approx(float((s - t)[mask].mean()), rel=1e-4, abs=1e-6)
    assert first["distillation/abs_loss"] == pytest.approx(float((s - t).abs()[mask].mean()), rel=1e-4)
    for _ in range(4):
        data.batch["old_log_probs"], _ = actor.compute_log_prob(data)  # on-policy again
        last = actor.update_policy(data)
    assert last["distillation/abs_loss"] < 0.8 * first["distillation/abs_loss"]
