"""The recipe with a discriminative reward model on a pool of its own (core's ``RewardModelWorker``),
scoring samples as they arrive (``scoring.py``); shared by the native test and the vLLM one. Every trained
sample's ``rm_scores`` are checked against the same checkpoint run through plain transformers."""

from __future__ import annotations

import torch

from .runs import scoring_recorder


def build_reward_model(path, tokenizer_dir) -> str:
    """A random 1-label ``Qwen2ForSequenceClassification`` over the policy's tokenizer, saved to ``path``."""
    import transformers
    from verl.workers.tiny import tiny_qwen2_config

    tok = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    config = tiny_qwen2_config("xs", vocab_size=len(tok))
    config.num_labels, config.pad_token_id = 1, tok.pad_token_id
    torch.manual_seed(0)
    transformers.Qwen2ForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def run_with_reward_model(tmp_path, assets: list[str], extra: list[str]) -> tuple[list, dict]:
    """Two steps of the CPU default with the RM on its own pool; returns (trained samples, last metrics)."""
    from verl.trainer.main_ppo import run_ppo
    from verl_recipe_fully_async.main import RECIPE

    policy = next(a.split("=", 1)[1] for a in assets if a.startswith("actor_rollout_ref.model.path="))
    rm = build_reward_model(tmp_path / "rm", policy)
    trained, calls = [], []
    cfg = RECIPE.load_config(
        [
            *assets,
            *extra,
            "reward.reward_model.enable=true",
            f"reward.reward_model.model.path={rm}",
            "reward.reward_model.enable_resource_pool=true",
            "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1",
            "trainer.total_training_steps=2",
            "trainer.test_freq=-1",
            "trainer.val_before_train=false",
            f"trainer.default_local_dir={tmp_path / 'run'}",
        ]
    )
    last = run_ppo(cfg, **{**RECIPE.trainer_kwargs(cfg), "trainer_cls": scoring_recorder(trained, calls)})
    check_scores(trained, rm)
    assert len(trained) == 2 * int(cfg.data.train_batch_size)
    assert sum(calls) >= len(trained) and len(calls) > 1  # scored as they came, not in one block
    return trained, last


def check_scores(samples, rm_path: str) -> None:
    """Each row's ``rm_scores`` is the RM's score of its prompt + response, on its last response token."""
    import transformers

    model = transformers.Qwen2ForSequenceClassification.from_pretrained(rm_path).eval()
    for s in samples:
        b = s.data.batch
        for i in range(len(s.data)):
            ids = b["input_ids"][i][b["attention_mask"][i].bool()]
            with torch.no_grad():  # the score head on the last token (HF's own pooling would stop at a pad id)
                want = model.score(model.model(input_ids=ids[None]).last_hidden_state[:, -1])[0, 0].float()
            n = int(b["response_mask"][i].sum())
            scores = b["rm_scores"][i]
            assert torch.count_nonzero(scores[:n][:-1]) == 0 and torch.count_nonzero(scores[n:]) == 0
            torch.testing.assert_close(scores[n - 1], want, atol=1e-4, rtol=0)
