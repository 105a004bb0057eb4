"""Toy CPU workers for trainer tests: a softmax bandit policy and a tabular critic (no LLM).

Vocabulary: 0 = pad, 1 = EOS, 2..V-1 = content tokens. A prompt is a left-padded token sequence; the
policy only looks at its last token p and samples every response token from softmax(W[p]) until EOS
or ``rollout.response_length`` tokens. The reward (``bandit_reward_fn``, on the driver) is 1 when the
first response token is ``target(p)``, so a learning policy's mean reward rises from about 1/V to 1.

The workers keep the upstream method names and dispatch modes, train data-parallel over gloo when
the group has more than one worker, and checkpoint their parameters, optimizer and sampling RNG, so a
resumed run continues bit-for-bit.
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist
from verl.protocol import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.reward_loop import SampleScorer
from verl.utils.torch_functional import entropy_from_logits, masked_mean

VOCAB = 6
PAD, EOS = 0, 1


def target(p: torch.Tensor | int):
    """The rewarded first response token for last prompt token p (a content token, never p itself)."""
    return 2 + (p - 2 + 1) % (VOCAB - 2)


def make_prompts(num: int, prompt_len: int = 3, seed: int = 0) -> list[dict]:
    """Dataset rows: left-padded prompts of 1..prompt_len content tokens, with upstream's tensor keys."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(num):
        n = int(torch.randint(1, prompt_len + 1, (1,), generator=g))
        toks = torch.randint(2, VOCAB, (n,), generator=g)
        ids = torch.cat([torch.full((prompt_len - n,), PAD), toks])
        mask = (torch.arange(prompt_len) >= prompt_len - n).long()
        pos = (mask.cumsum(0) - 1).clamp(min=0)
        rows.append({"input_ids": ids, "attention_mask": mask, "position_ids": pos,
                     "data_source": "bandit", "index": i})
    return rows


def bandit_reward_fn(data: DataProto, return_dict: bool = False):
    """Score 1 when the first response token is target(last prompt token), on the last valid token."""
    prompts, responses = data.batch["prompts"], data.batch["responses"]
    mask = data.batch["response_mask"]
    scores = (responses[:, 0] == target(prompts[:, -1])).float()
    reward = torch.zeros_like(responses, dtype=torch.float32)
    last = (mask.sum(-1) - 1).clamp(min=0)
    reward[torch.arange(len(reward)), last] = scores
    if return_dict:
        return {"reward_tensor": reward, "reward_extra_info": {"acc": scores.tolist()}}
    return reward


def _init_dist(world_size: int) -> None:
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("gloo")


def _allreduce_grads(params: list[torch.Tensor], world_size: int) -> None:
    if world_size > 1:
        for p in params:
            dist.all_reduce(p.grad)
            p.grad /= world_size


class BanditActorRolloutRef(Worker):
    """Actor + rollout + reference of the bandit policy (role actor_rollout, actor_rollout_ref or ref)."""

    def __init__(self, config, role: str = "actor_rollout", total_training_steps: int | None = None,
                 device: str | None = None, seed: int | None = None):
        super().__init__()
        self.config = config
        self.role = role
        self.total_training_steps = total_training_steps
        self.device, self.seed = device, seed

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        _init_dist(self.world_size)
        torch.manual_seed(0)  # same initial parameters on every rank
        self.W = torch.zeros(VOCAB, VOCAB, requires_grad=True)
        self.W_ref = self.W.detach().clone()
        self.opt = torch.optim.Adam([self.W], lr=self.config.actor.optim.lr)
        self.gen = torch.Generator().manual_seed(1234 + self.rank)
        self.updates = 0

    def _logits(self, prompts: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
        return W[prompts[:, -1]]  # [N, V]

    def _token_logp(self, data: DataProto, W: torch.Tensor):
        logits = self._logits(data.batch["prompts"], W)
        logp = torch.log_softmax(logits, -1)
        resp = data.batch["responses"]
        lp = logp.gather(-1, resp.clamp(min=0)) * data.batch["response_mask"]
        ent = entropy_from_logits(logits).unsqueeze(-1).expand_as(lp)
        return lp, ent

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        cfg = self.config.rollout
        ids = prompts.batch["input_ids"]
        n, max_len = ids.shape[0], cfg.response_length
        greedy = not prompts.meta_info.get("do_sample", True)
        with torch.no_grad():
            probs = torch.softmax(self._logits(ids, self.W), -1)
            if greedy:
                toks = probs.argmax(-1, keepdim=True).expand(n, max_len)
            else:
                toks = torch.multinomial(probs, max_len, replacement=True, generator=self.gen)
        # Stop at the first EOS (kept), pad after it; R = the longest response in this batch (over the
        # group's ranks, as the real rollouts do: each rank generates a part of it).
        is_eos = toks == EOS
        after = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
        mask = (~after).long()
        resp_len = mask.sum(-1).max()
        if dist.is_initialized():
            dist.all_reduce(resp_len, op=dist.ReduceOp.MAX)
        resp_len = int(resp_len)
        responses = torch.where(after, torch.full_like(toks, PAD), toks)[:, :resp_len]
        mask = mask[:, :resp_len]
        attn = torch.cat([prompts.batch["attention_mask"], mask], -1)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        return DataProto.from_dict(
            tensors={"prompts": ids, "responses": responses, "response_mask": mask,
                     "input_ids": torch.cat([ids, responses], -1), "attention_mask": attn, "position_ids": pos},
            meta_info={"metrics": {"rollout/eos_rate": [float(is_eos.any(-1).float().mean())]}},
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        with torch.no_grad():
            lp, ent = self._token_logp(data, self.W)
        return DataProto.from_dict(tensors={"old_log_probs": lp, "entropys": ent})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        with torch.no_grad():
            lp, _ = self._token_logp(data, self.W_ref)
        return DataProto.from_dict(tensors={"ref_log_prob": lp})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        actor = self.config.actor
        mini = actor.ppo_mini_batch_size * self.config.rollout.n // self.world_size
        loss_fn = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
        metrics: dict[str, list] = {}
        for _ in range(actor.ppo_epochs):
            for mb in data.split(mini):
                b = mb.batch
                lp, ent = self._token_logp(mb, self.W)
                pg_loss, pg_metrics = loss_fn(b["old_log_probs"], lp, b["advantages"], b["response_mask"],
                                              actor.loss_agg_mode, actor)
                loss = pg_loss - actor.entropy_coeff * masked_mean(ent, b["response_mask"])
                if actor.use_kl_loss:
                    kl = core_algos.kl_penalty(lp, b["ref_log_prob"], actor.kl_loss_type)
                    kl_loss = core_algos.agg_loss(kl, b["response_mask"], actor.loss_agg_mode)
                    loss = loss + actor.kl_loss_coef * kl_loss
                    metrics.setdefault("actor/kl_loss", []).append(float(kl_loss.detach()))
                self.opt.zero_grad()
                loss.backward()
                _allreduce_grads([self.W], self.world_size)
                grad_norm = torch.nn.utils.clip_grad_norm_([self.W], actor.grad_clip)
                self.opt.step()
                metrics.setdefault("actor/pg_loss", []).append(float(pg_loss.detach()))
                metrics.setdefault("actor/grad_norm", []).append(float(grad_norm))
                for k, v in pg_metrics.items():
                    metrics.setdefault(k, []).append(float(v))
        self.updates += 1
        metrics["actor/lr"] = [actor.optim.lr]
        return DataProto(meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int = 0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        torch.save({"W": self.W.detach().clone(), "W_ref": self.W_ref, "opt": self.opt.state_dict(),
                    "gen": self.gen.get_state(), "updates": self.updates, "step": global_step,
                    "total_training_steps": self.total_training_steps},
                   os.path.join(local_path, f"rank_{self.rank}.pt"))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, del_local_after_load: bool = False):
        state = torch.load(os.path.join(local_path, f"rank_{self.rank}.pt"), weights_only=False)
        with torch.no_grad():
            self.W.copy_(state["W"])
        self.W_ref = state["W_ref"]
        self.opt.load_state_dict(state["opt"])
        self.gen.set_state(state["gen"])
        self.updates = state["updates"]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_info(self) -> dict:
        """Test helper: what the worker was constructed with and how often it was updated."""
        return {"total_training_steps": self.total_training_steps, "updates": self.updates, "role": self.role,
                "device": self.device, "seed": self.seed}


class BanditCritic(Worker):
    """Tabular critic: V[last prompt token, response position]."""

    def __init__(self, config, total_training_steps: int | None = None, device: str | None = None,
                 seed: int | None = None):
        super().__init__()
        self.config = config
        self.total_training_steps = total_training_steps

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        _init_dist(self.world_size)
        self.V = torch.zeros(VOCAB, 64, requires_grad=True)
        self.opt = torch.optim.Adam([self.V], lr=self.config.optim.lr)

    def _values(self, data: DataProto) -> torch.Tensor:
        r = data.batch["responses"].shape[-1]
        return self.V[data.batch["prompts"][:, -1], :r] * data.batch["response_mask"]

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        with torch.no_grad():
            return DataProto.from_dict(tensors={"values": self._values(data)})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto) -> DataProto:
        cfg = self.config
        mini = cfg.ppo_mini_batch_size * cfg.rollout_n // self.world_size
        metrics: dict[str, list] = {}
        for _ in range(cfg.ppo_epochs):
            for mb in data.split(mini):
                b = mb.batch
                vf_loss, clipfrac = core_algos.compute_value_loss(
                    self._values(mb), b["returns"], b["values"], b["response_mask"], cfg.cliprange_value, cfg.loss_agg_mode)
                self.opt.zero_grad()
                vf_loss.backward()
                _allreduce_grads([self.V], self.world_size)
                grad_norm = torch.nn.utils.clip_grad_norm_([self.V], cfg.grad_clip)
                self.opt.step()
                metrics.setdefault("critic/vf_loss", []).append(float(vf_loss.detach()))
                metrics.setdefault("critic/vf_clipfrac", []).append(float(clipfrac))
                metrics.setdefault("critic/grad_norm", []).append(float(grad_norm))
        return DataProto(meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int = 0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        torch.save({"V": self.V.detach().clone(), "opt": self.opt.state_dict()},
                   os.path.join(local_path, f"rank_{self.rank}.pt"))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, del_local_after_load: bool = False):
        state = torch.load(os.path.join(local_path, f"rank_{self.rank}.pt"), weights_only=False)
        with torch.no_grad():
            self.V.copy_(state["V"])
        self.opt.load_state_dict(state["opt"])




def collate_rows(rows: list[dict]) -> dict:
    """Stack tensors; everything else becomes a numpy object array (the RL collate contract)."""
    out = {}
    for key in rows[0]:
        vals = [r[key] for r in rows]
        if isinstance(vals[0], torch.Tensor):
            out[key] = torch.stack(vals)
        else:
            arr = np.empty(len(vals), dtype=object)
            arr[:] = vals
            out[key] = arr
    return out


class BanditTokenizer:
    """Just enough tokenizer for RLHFDataset and the reward managers: a digit d is token 2 + d % 4,
    token t decodes to the letter chr(ord('a') + t); the chat template keeps the user's text only."""

    pad_token_id = PAD
    eos_token_id = EOS

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False, **kwargs):
        return "".join(m["content"] for m in messages)

    def __call__(self, text, add_special_tokens=False, **kwargs):
        return {"input_ids": [2 + int(c) % (VOCAB - 2) for c in text]}

    def decode(self, ids, skip_special_tokens=False, **kwargs):
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            ids = [i for i in ids if i not in (PAD, EOS)]
        return "".join(chr(ord("a") + i) for i in ids)

    def batch_decode(self, batch, **kwargs):
        return [self.decode(ids, **kwargs) for ids in batch]


def bandit_rows(num: int, seed: int = 0) -> list[dict]:
    """Parquet/jsonl rows (the upstream row contract) whose rewarded answer is target(last token)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(num):
        digits = "".join(str(int(d)) for d in torch.randint(0, 10, (int(torch.randint(1, 4, (1,), generator=g)),), generator=g))
        last = 2 + int(digits[-1]) % (VOCAB - 2)
        rows.append({"data_source": "bandit", "prompt": [{"role": "user", "content": digits}], "ability": "toy",
                     "reward_model": {"ground_truth": chr(ord("a") + target(last))}, "extra_info": {"index": i}})
    return rows


class BanditScorer(SampleScorer):
    """`bandit_reward_fn` for the reward loop: a part's scores are its rows' rewards; `assemble` puts them
    on the last valid token of the whole batch, as the one-pass function does."""

    def __call__(self, data: DataProto, return_dict: bool = False):
        return bandit_reward_fn(data, return_dict)

    def score_part(self, data: DataProto, first_row: int = 0) -> dict:
        out = bandit_reward_fn(data, return_dict=True)
        return {"scores": out["reward_tensor"].sum(-1), "acc": out["reward_extra_info"]["acc"]}

    def assemble(self, data: DataProto, parts: list[dict]) -> dict:
        scores = torch.cat([p["scores"] for p in parts])
        mask = data.batch["response_mask"]
        reward = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        reward[torch.arange(len(reward)), (mask.sum(-1) - 1).clamp(min=0)] = scores
        return {"reward_tensor": reward, "reward_extra_info": {"acc": [a for p in parts for a in p["acc"]]}}
