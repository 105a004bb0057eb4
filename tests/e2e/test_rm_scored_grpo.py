"""GRPO scored by a model reward model only, on CPU: a tiny RM trained to prefer one answer form (a
numeric answer: the share of digit characters in the response) scores a random-init tiny policy
through `RewardModelWorker` on its own resource pool; the RM score must rise over training.

The RM is a Qwen2 sequence classifier trained here (plain torch, seeded) by regression on random
character strings after the arithmetic prompts: its target is the fraction of digits in the
response. It is saved and loaded by the worker through ``from_pretrained(path)`` like any RM.
"""

import json
import random

import pytest
import torch

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 10
RESPONSE_LEN = 6


def _rm_examples(tok, prompts, n, rng):
    """(token ids of prompt + response + eos, digit share of the response) for random responses."""
    digits, letters = "0123456789", "abcdefghijklmnopqrstuvwxyz +-=#"
    out = []
    for _ in range(n):
        share = rng.random()
        length = rng.randint(1, RESPONSE_LEN)
        text = "".join(rng.choice(digits) if rng.random() < share else rng.choice(letters) for _ in range(length))
        prompt = tok.apply_chat_template([{"role": "user", "content": rng.choice(prompts)}], tokenize=False,
                                         add_generation_prompt=True)  # fmt: skip
        ids = tok(prompt + text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        out.append((ids, sum(c in digits for c in text) / len(text)))
    return out


def _train_rm(path, tok, prompts, steps=300):
    import transformers
    from verl.workers.tiny import tiny_qwen2_config

    config = tiny_qwen2_config("xs", vocab_size=len(tok))
    config.num_labels, config.pad_token_id = 1, tok.pad_token_id
    torch.manual_seed(0)
    model = transformers.Qwen2ForSequenceClassification(config)
    rng = random.Random(0)
    data = _rm_examples(tok, prompts, 512, rng)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(0)

    def batch(rows):
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id)
        mask = torch.zeros_like(ids)
        for i, (x, _) in enumerate(rows):  # left padding: the last column is every row's last token
            ids[i, width - len(x):] = torch.tensor(x)
            mask[i, width - len(x):] = 1
        hidden = model.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
        return model.score(hidden.last_hidden_state[:, -1])[:, 0], torch.tensor([y for _, y in rows])

    for _ in range(steps):
        pick = torch.randint(0, len(data), (32,), generator=g).tolist()
        pred, target = batch([data[i] for i in pick])
        loss = torch.nn.functional.mse_loss(pred, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred, target = batch(_rm_examples(tok, prompts, 128, random.Random(1)))
    corr = torch.corrcoef(torch.stack([pred, target]))[0, 1].item()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return corr


def test_rm_scored_grpo_on_cpu(ray_cluster, tmp_path, task_data, tiny_chat_model):
    import pyarrow.parquet as pq
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import run_ppo
    from verl.workers.tokenizer import hf_tokenizer

    policy = str(tiny_chat_model)
    tok = hf_tokenizer(policy)
    prompts = [row[0]["content"] for row in pq.read_table(task_data["train"]).column("prompt").to_pylist()][:64]
    corr = _train_rm(tmp_path / "rm", tok, prompts)
    assert corr > 0.8, f"the RM did not learn the digit share (correlation {corr:.2f} on held-out strings)"

    out = tmp_path / "out"
    cfg = load_config([
        f"data.train_files={task_data['train']}", "data.max_prompt_length=32",
        f"data.max_response_length={RESPONSE_LEN}", "data.train_batch_size=8",
        f"actor_rollout_ref.model.path={policy}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.rollout.seed=7", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.actor.use_rollout_log_probs=true",
        "actor_rollout_ref.actor.optim.lr=5e-3", "actor_rollout_ref.actor.use_kl_loss=false",
        "reward.reward_model.enable=true", f"reward.reward_model.model.path={tmp_path / 'rm'}",
        "reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1",
        "reward.reward_model.n_gpus_per_node=1", "reward.reward_model.micro_batch_size_per_gpu=16",
        "trainer.device=cpu", "trainer.nnodes=1", "trainer.n_gpus_per_node=2",
        f"trainer.total_training_steps={STEPS}", "trainer.logger=[jsonl]", "trainer.val_before_train=false",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.progress_bar=false", "trainer.resume_mode=disable",
        f"trainer.default_local_dir={out}",
    ])  # fmt: skip
    validate_config(cfg)
    run_ppo(cfg)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    scores = [r["critic/score/mean"] for r in rows if "critic/score/mean" in r]
    print("RM score per step:", [round(s, 3) for s in scores])
    assert len(scores) == STEPS
    first, last = sum(scores[:2]) / 2, sum(scores[-2:]) / 2
    assert last > 1.5 * first, f"RM score {first:.3f} -> {last:.3f}"
