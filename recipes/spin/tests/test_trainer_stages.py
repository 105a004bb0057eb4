"""RaySPINTrainer's stages driven through core's ``train_step`` without Ray: a scripted worker group stands
in for the workers and records what the trainer asks of them."""

import numpy as np
import pytest
import torch
from verl.protocol import DataProto
from verl.workers.rollout.base import generation_tensors
from verl_recipe_spin.config import load_spin_config
from verl_recipe_spin.main_spin import RECIPE
from verl_recipe_spin.spin_ray_trainer import RaySPINTrainer

P, R = 2, 2  # prompt and response widths of the scripted batches


class ScriptedWorkers:
    """What the trainer calls on the actor/rollout/ref worker group. Generation answers prompt k with the
    tokens ``script[k]``; log-probs are fixed per row: the policy's ``-1`` per token, the reference's ``-2``."""

    def __init__(self, script: list[list[int]]):
        self.script, self.calls, self.updates = script, [], []
        self.world_size = 1

    def refresh_ref_from_actor(self):
        self.calls.append("refresh")

    def generate_sequences(self, gen: DataProto) -> DataProto:
        self.calls.append("generate")
        n = len(gen)
        responses = torch.zeros(n, R, dtype=torch.long)
        mask = torch.zeros(n, R, dtype=torch.long)
        for i in range(n):
            toks = self.script[i % len(self.script)]
            responses[i, : len(toks)] = torch.tensor(toks)
            mask[i, : len(toks)] = 1
        pos = torch.arange(P + R).expand(n, -1).clone()
        b = gen.batch
        return DataProto.from_dict(tensors=generation_tensors(b["input_ids"], b["attention_mask"], responses, mask, pos))

    def compute_log_prob(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"old_log_probs": -1.0 * data.batch["response_mask"].float()})

    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"ref_log_prob": -2.0 * data.batch["response_mask"].float()})

    def update_actor(self, data: DataProto) -> DataProto:
        self.updates.append(data)
        return DataProto(meta_info={"metrics": {"actor/pg_loss": 0.5}})


class CharTokens:
    """A tokenizer for the sft targets: one token per character (ids 10 + digit), a 9 ends the turn."""

    pad_token_id = 0

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False):
        text = "".join(m["content"] + ("|" if m["role"] == "assistant" else "") for m in messages)
        return text

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [9 if c == "|" else 10 + int(c) if c.isdigit() else 5 for c in text]}


def _reward_fn(data: DataProto, return_dict=True):
    """Exact match of the response tokens with the row's ground truth (token ids, or a string of digits
    answered as its `CharTokens` and the end of the turn)."""
    scores = torch.zeros(data.batch["responses"].shape)
    for i in range(len(data)):
        n = int(data.batch["response_mask"][i].sum())
        truth = data.non_tensor_batch["reward_model"][i]["ground_truth"]
        if isinstance(truth, str):
            truth = [10 + int(c) for c in truth] + [9]
        scores[i, n - 1] = float(data.batch["responses"][i, :n].tolist() == truth)
    return {"reward_tensor": scores, "reward_extra_info": {}}


def _trainer(script, *overrides) -> tuple[RaySPINTrainer, ScriptedWorkers]:
    t = RaySPINTrainer.__new__(RaySPINTrainer)  # no workers, no data loaders: only what a step needs
    t.config = load_spin_config(
        RECIPE.with_default_config(  # the CPU default, sized for two prompts
            ["data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2", *overrides]
        )
    )
    t.global_steps, t.total_training_steps, t.val_reward_fn, t.group_accumulator = 1, 10, None, None
    t.tokenizer = CharTokens()
    t._stop_ids = {9}  # the scripted model's end of turn (read from the model's files in a real run)
    t.reward_fn = _reward_fn
    t.use_rm, t.use_critic, t.use_reference_policy = False, False, True
    wg = ScriptedWorkers(script)
    t.actor_rollout_wg = t.ref_policy_wg = wg
    return t, wg


def _prompts(truths: list[list[int]]) -> DataProto:
    n = len(truths)
    return DataProto.from_dict(
        tensors={
            "input_ids": torch.full((n, P), 7),
            "attention_mask": torch.ones(n, P, dtype=torch.long),
            "position_ids": torch.arange(P).expand(n, -1).clone(),
        },
        non_tensors={
            "reward_model": np.array([{"ground_truth": t} for t in truths], dtype=object),
            "raw_prompt": np.array([[{"role": "user", "content": "1+1="}]] * n, dtype=object),
        },
    )


def test_a_tied_pair_trains_with_its_first_answer_chosen_by_default():
    # upstream's argmax over a tied pair picks the first answer; n=2 answers [12], [11] to a prompt that
    # wants [13]: both wrong, a tie
    t, wg = _trainer([[12], [11]], "actor_rollout_ref.rollout.n=2", "algorithm.spin_mode=reward")
    out = t.train_step(_prompts([[13]]), {}, {})
    assert out.batch["responses"][:, 0].tolist() == [12, 11]
    assert out.batch["advantages"][:, 0].tolist() == [1.0, -1.0]  # trained: the first row chosen
    (update,) = wg.updates
    assert update.batch["advantages"][:, 0].tolist() == [1.0, -1.0]


def test_reward_mode_step_trains_best_against_worst_with_the_reference_as_anchor():
    # n=3 answers per prompt: script cycles [12], [11], [12]; prompt 0 wants [12] (2 right, 1 wrong),
    # prompt 1 wants [13] (all wrong: no preference, dropped with spin_ties=drop)
    t, wg = _trainer(
        [[12], [11], [12]],
        "actor_rollout_ref.rollout.n=3",
        "algorithm.spin_mode=reward",
        "algorithm.spin_ties=drop",
        "trainer.ref_update_freq=2",
        "trainer.balance_batch=false",
    )
    metrics: dict = {}
    out = t.train_step(_prompts([[12], [13]]), metrics, {})
    assert wg.calls == ["generate"]  # step 1 is not a multiple of ref_update_freq=2
    assert out.batch["responses"][:, 0].tolist() == [12, 11, 12, 12]  # best, worst (a tie: first, last row)
    assert out.batch["advantages"][:, 0].tolist() == [1.0, -1.0, 0.0, 0.0]
    (update,) = wg.updates
    assert update.meta_info["rows_per_prompt"] == 2
    assert torch.equal(update.batch["old_log_probs"], out.batch["ref_log_prob"])  # DPO's anchor
    assert torch.equal(out.batch["old_log_probs"], -out.batch["response_mask"].float())  # left as computed
    assert metrics["spin/gen_score/mean"] == pytest.approx(2 / 6)
    assert metrics["spin/preference_pairs"] == 0.5 and metrics["spin/ref_refreshed"] == 0.0
    # one token each: log pi margin -1 - (-1) = 0; vs the reference beta * ((-1 + 2) - (-1 + 2)) = 0
    assert metrics["spin/logp_margin"] == 0.0 and metrics["spin/reward_margin"] == 0.0
    t.global_steps = 2
    t.train_step(_prompts([[12], [13]]), {}, {})
    assert wg.calls == ["generate", "refresh", "generate"]  # refreshed before step 2 generates


def test_sft_mode_step_pairs_the_target_with_the_models_answer():
    # n=1: the model answers [11, 9] ("1" and the end of turn) to both prompts; the targets are "13" ->
    # [11, 13, 9] and "1" -> [11, 9], the model's own answer to the second prompt
    t, wg = _trainer(
        [[11, 9]],
        "actor_rollout_ref.rollout.n=1",
        "algorithm.spin_mode=sft",
        "trainer.ref_update_freq=1",
        "trainer.balance_batch=false",
        "actor_rollout_ref.rollout.response_length=4",
    )
    metrics: dict = {}
    batch = _prompts([[11, 13, 9], [11, 9]])
    batch.non_tensor_batch["reward_model"] = np.array(
        [{"ground_truth": "13"}, {"ground_truth": "1"}], dtype=object
    )
    out = t.train_step(batch, metrics, {})
    assert wg.calls == ["refresh", "generate"]
    assert out.batch["responses"].tolist() == [[11, 13, 9], [11, 9, 0], [11, 9, 0], [11, 9, 0]]
    assert out.batch["advantages"][:, 0].tolist() == [1.0, -1.0, 1.0, -1.0]  # the target always wins
    assert metrics["spin/target_score/mean"] == 1.0 and metrics["spin/gen_score/mean"] == 0.5
    # margins over the contested pair only (the second pair is the same answer twice): policy log-probs
    # are -1 per token, so -3 - (-2) = -1; against the reference (-2 per token) beta * (3 - 2)
    assert metrics["spin/contested_pairs"] == 0.5
    assert metrics["spin/logp_margin"] == pytest.approx(-1.0)
    assert metrics["spin/reward_margin"] == pytest.approx(0.1)
    assert len(out) == 4 and wg.updates[0].meta_info["rows_per_prompt"] == 2
