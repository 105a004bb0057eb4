"""The bare-PyTorch GRPO step: the same work as the framework steps with nothing around it.

One step, all in one process, no Ray, no trainer, no DataProto:

1. rollout: 8 prompts x 8 samples = 64 rows; one prefill, then one token per step through the
   model's KV cache, sampling from ``softmax(logits / temperature)``; exactly ``new_tokens`` tokens
   per row (EOS is not a stop token, as with ``rollout.ignore_eos=true`` in our trainer);
2. reward: decode, exact match against ``a+b`` -> group-normalised advantages
   ``(r - mean_group) / (std_group + 1e-6)`` (GRPO's outcome advantage);
3. old log-probs: one no-grad forward over prompt + response;
4. update: forward + backward over the 64 rows (one micro-batch, or ``micro_batch`` rows at a time
   with the gradients accumulated), clipped-ratio policy loss averaged over all response tokens,
   grad-norm clip 1.0, one AdamW step.

Every prompt has 4 tokens, so there is no padding and no attention mask is needed.

``dtype="bf16"``: the whole step under ``torch.autocast("cpu", bfloat16)`` over the fp32 weights (the
plain-PyTorch way to compute in bf16 with fp32 masters; TRL's ``bf16=True`` is the same autocast).
The dtypes the first layer's q projection produced in generation and in the update are recorded.

Used in-process (``BareGRPOStep``) or as a step server (``python bare.py --serve ...``): it prints
``READY {json}`` once, then answers each ``step`` line on stdin with ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import resource
import sys
import time
from pathlib import Path

import torch


def peak_rss_mib() -> float:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class BareGRPOStep:
    """One GRPO step at a time on the model folder ``model_path`` (see the module doc)."""

    def __init__(
        self,
        model_path: str | Path,
        new_tokens: int,
        prompts_per_step: int = 8,
        n: int = 8,
        lr: float = 1e-3,
        clip_ratio: float = 0.2,
        temperature: float = 1.0,
        seed: int = 0,
        old_log_prob: bool = True,
        micro_batch: int = 0,
        dtype: str = "fp32",
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(str(model_path))
        self.model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
        self.model.train()
        self.new_tokens, self.P, self.n = int(new_tokens), int(prompts_per_step), int(n)
        self.clip_ratio, self.temperature, self.old_log_prob = clip_ratio, temperature, old_log_prob
        self.micro_batch = int(micro_batch) or self.P * self.n
        if (self.P * self.n) % self.micro_batch:
            raise ValueError(
                f"micro_batch={micro_batch} does not divide the {self.P * self.n} rows of a step"
            )
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.01)
        problems = json.loads((Path(model_path) / "prompts.json").read_text())
        random.Random(seed).shuffle(problems)
        self.problems = problems
        self.cursor = 0
        self.gen = torch.Generator().manual_seed(seed)
        self.n_params = sum(p.numel() for p in self.model.parameters())
        if dtype not in ("fp32", "bf16"):
            raise ValueError(f"dtype={dtype!r}: expected fp32 or bf16")
        self.dtype = dtype
        self.seen: dict[str, set[str]] = {"gen": set(), "update": set()}
        self._phase = "gen"
        q_proj = self.model.model.layers[0].self_attn.q_proj
        q_proj.register_forward_hook(lambda m, i, out: self.seen[self._phase].add(str(out.dtype)[6:]))

    def _precision(self):
        if self.dtype == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _next_prompts(self) -> tuple[list[str], list[str]]:
        if self.cursor + self.P > len(self.problems):
            self.cursor = 0
        chosen = self.problems[self.cursor : self.cursor + self.P]
        self.cursor += self.P
        prompts = [p for p, _ in chosen for _ in range(self.n)]  # group rows adjacent
        answers = [a for _, a in chosen for _ in range(self.n)]
        return prompts, answers

    @torch.no_grad()
    def _sample(self, prompt_ids: torch.Tensor) -> torch.Tensor:
        """``new_tokens`` sampled tokens per row, [B, L], through the KV cache."""
        out = self.model(input_ids=prompt_ids, use_cache=True, logits_to_keep=1)
        tokens = []
        for i in range(self.new_tokens):
            probs = torch.softmax(out.logits[:, -1, :].float() / self.temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=self.gen)
            tokens.append(nxt)
            if i + 1 < self.new_tokens:
                out = self.model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
        return torch.cat(tokens, dim=1)

    def _response_log_probs(self, seq: torch.Tensor) -> torch.Tensor:
        """log p(response token | prefix) for the last ``new_tokens`` positions of ``seq``, [B, L]."""
        L = self.new_tokens
        logits = self.model(input_ids=seq, logits_to_keep=L + 1).logits[:, :-1, :].float() / self.temperature
        return torch.log_softmax(logits, dim=-1).gather(-1, seq[:, -L:].unsqueeze(-1)).squeeze(-1)

    def step(self) -> dict:
        """Run one step; returns seconds per phase, CPU seconds (all threads), tokens, mean reward, peak RSS."""
        t0, c0 = time.perf_counter(), time.process_time()
        prompts, answers = self._next_prompts()
        prompt_ids = self.tok(prompts, return_tensors="pt", add_special_tokens=False)["input_ids"]
        self.model.eval()
        self._phase = "gen"
        with self._precision():
            responses = self._sample(prompt_ids)
        self.model.train()
        self._phase = "update"
        t1 = time.perf_counter()

        texts = self.tok.batch_decode(responses, skip_special_tokens=True)
        scores = torch.tensor([float(t.strip() == a) for t, a in zip(texts, answers)])
        grouped = scores.view(self.P, self.n)
        adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(-1, 1)
        seq = torch.cat([prompt_ids, responses], dim=1)
        t2 = time.perf_counter()

        mb = self.micro_batch
        chunks = [slice(i, i + mb) for i in range(0, seq.shape[0], mb)]
        old = None
        if self.old_log_prob:
            with torch.no_grad(), self._precision():
                old = torch.cat([self._response_log_probs(seq[c]) for c in chunks])
        t3 = time.perf_counter()

        eps = self.clip_ratio
        for c in chunks:
            with self._precision():
                logp = self._response_log_probs(seq[c])
            ratio = torch.exp(logp - (logp.detach() if old is None else old[c]))
            a = adv[c]
            # the mean over all response tokens of the step, accumulated one micro-batch at a time
            loss = -torch.min(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a).sum() / responses.numel()
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        return {
            "step_s": t4 - t0,
            "cpu_s": time.process_time() - c0,
            "gen_s": t1 - t0,
            "reward_s": t2 - t1,
            "old_log_prob_s": t3 - t2,
            "update_s": t4 - t3,
            "gen_tokens": int(responses.numel()),
            "reward": float(scores.mean()),
            "peak_rss_mib": peak_rss_mib(),
            "matmul_dtypes": {k: sorted(v) for k, v in self.seen.items()},
        }


def serve(args: argparse.Namespace) -> None:
    """The step-server loop (see the module doc)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    bare = BareGRPOStep(
        args.model, args.new_tokens, lr=args.lr, seed=args.seed, micro_batch=args.micro_batch, dtype=args.dtype
    )
    from machine import torch_build

    ready = {
        "impl": "bare",
        "params": bare.n_params,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "torch_build": torch_build(),
        "micro_batch": bare.micro_batch,
        "dtype": args.dtype,
    }
    print("READY " + json.dumps(ready), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "step":
            print("RESULT " + json.dumps(bare.step()), flush=True)
        elif cmd == "quit":
            return
        else:
            raise SystemExit(f"bare.py: unknown command {cmd!r}; expected 'step' or 'quit'")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model folder from assets.ensure_model")
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = torch's default)")
    ap.add_argument("--micro-batch", type=int, default=0, help="rows per forward/backward (0 = all 64)")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="bf16: autocast over fp32 weights")
    ap.add_argument("--serve", action="store_true", help="answer 'step' lines on stdin (else run --steps)")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    if args.serve:
        serve(args)
        return
    bare = BareGRPOStep(
        args.model, args.new_tokens, lr=args.lr, seed=args.seed, micro_batch=args.micro_batch, dtype=args.dtype
    )
    for _ in range(args.steps):
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in bare.step().items()}))


if __name__ == "__main__":
    main()
