"""The default demo's SFT warm start in fp32 and in bf16 mixed precision, per data-order seed.

Why the bf16 demo's warm start came out weaker than fp32's: this runs the demo's SFT (the same
config, 180 steps, batch 64, lr 1e-3) on one rank in this process (the fsdp2 engine's one-rank path,
no Ray) and scores the result by greedy exact match on the held-out problems, for

    fp32       model_dtype=float32
    bf16       model_dtype=bfloat16: bf16 compute on fp32 master weights (what the demo runs)
    autocast   control: fp32 weights and fp32 residual stream, matmuls under torch.autocast(bf16)
    fp32head   bf16 as above but the LM head (logits) computed in fp32: more precise than bf16

and prints the dtypes the engine really holds (parameters, gradients, AdamW state), the loss in
windows of 20 steps and the held-out accuracy. Usage (one JSON line per run):

    uv run python benchmarks/bf16_sft.py --variant bf16 --seed 1 [--steps 180] [--out DIR] [--save DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist


def held_out_accuracy(model, tok, test_file: str) -> float:
    """Greedy exact match on the held-out prompts (what the demo's validation scores)."""
    import pyarrow.parquet as pq

    test = pq.read_table(test_file).to_pydict()
    prompts = [tok.apply_chat_template(list(p), tokenize=False, add_generation_prompt=True) for p in test["prompt"]]
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=6, do_sample=False)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    hits = sum(t.strip() == rm["ground_truth"] for t, rm in zip(texts, test["reward_model"], strict=True))
    return hits / len(texts)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", choices=["fp32", "bf16", "autocast", "fp32head"], required=True)
    p.add_argument("--seed", type=int, default=1, help="data.seed (the order of the SFT batches)")
    p.add_argument("--steps", type=int, default=180)
    p.add_argument("--out", default=None, help="folder for the task data and base model (reused)")
    p.add_argument("--save", default=None, help="write the trained model as a Hugging Face folder here")
    args = p.parse_args(argv)

    from transformers import AutoModelForCausalLM
    from verl.trainer import demo
    from verl.trainer.model_builders import load_tokenizer
    from verl.trainer.sft import load_sft_config
    from verl.utils.dataset.loader import StatefulPromptLoader
    from verl.utils.dataset.sft_dataset import SFTDataset, sft_collate_fn
    from verl.workers.engine import build_engine
    from verl.workers.sft_worker import save_hf_folder, shifted_micro_batches

    torch.set_num_threads(1)
    root = Path(args.out or tempfile.mkdtemp(prefix="bf16_sft_"))
    if not (root / "data" / "sft_train.parquet").exists():
        demo.write_data(root / "data")
        demo.build_model(root / "base_model")
    dtype = "bfloat16" if args.variant in ("bf16", "fp32head") else "float32"
    data = {"sft": str(root / "data" / "sft_train.parquet")}
    cfg = load_sft_config(demo.sft_args(str(root / "base_model"), data, root / "sft", args.steps, 1, dtype)
                          + [f"data.seed={args.seed}"])
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp(prefix='store_')}", rank=0, world_size=1)
    torch.manual_seed(int(cfg.trainer.seed))
    tok = load_tokenizer(str(root / "base_model"))
    ds = SFTDataset(cfg.data.train_files, tok, cfg.data, max_samples=-1)
    batch_size = int(cfg.data.train_batch_size)
    loader = StatefulPromptLoader(ds, batch_size=batch_size, shuffle=True, seed=args.seed, drop_last=True,
                                  collate_fn=functools.partial(sft_collate_fn, pad_token_id=ds.pad_token_id))
    eng = build_engine("fsdp2", model_config=cfg.model, engine_config=cfg.model.fsdp_config, optim_config=cfg.optim,
                       model_type="causal_lm", grad_clip=float(cfg.optim.clip_grad), total_training_steps=args.steps)
    if args.variant == "fp32head":
        master = eng.module.model.embed_tokens.weight  # tied: the LM head's weight, fp32
        eng.module.lm_head.forward = lambda x: torch.nn.functional.linear(x.float(), master)
    autocast = functools.partial(torch.autocast, "cpu", dtype=torch.bfloat16)
    ctx = autocast if args.variant == "autocast" else contextlib.nullcontext
    losses: list[float] = []
    dtypes: dict[str, str] = {}
    while len(losses) < args.steps:
        for batch in loader:
            if len(losses) >= args.steps:
                break
            n_tokens = float(batch["loss_mask"][:, 1:].sum())

            def loss_fn(out, mb, n_tokens=n_tokens):
                return -(out["log_probs"] * mb["target_mask"]).sum() / n_tokens, {}

            with ctx():
                results = eng.forward_backward(shifted_micro_batches(batch, batch_size), loss_fn)
            if not dtypes:
                dtypes["grads"] = str({q.grad.dtype for q in eng.module.parameters() if q.grad is not None})
            eng.optimizer_step()
            eng.lr_scheduler_step()
            losses.append(sum(r["loss"] for r in results))
    dtypes["params"] = str({q.dtype for q in eng.module.parameters()})
    dtypes["adamw_state"] = str({v.dtype for s in eng.optimizer.state.values() for v in s.values() if v.dim()})

    masters = eng.full_state_dict()
    model = AutoModelForCausalLM.from_pretrained(str(root / "base_model"), dtype=torch.float32)
    model.load_state_dict(masters, strict=False)
    model.eval()
    test_file = str(root / "data" / "test.parquet")
    result = {
        "variant": args.variant, "seed": args.seed, "steps": args.steps, "dtypes": dtypes,
        "held_out_fp32_inference": held_out_accuracy(model, tok, test_file),
        "held_out_bf16_inference": held_out_accuracy(model.to(torch.bfloat16), tok, test_file),
        "loss_last_20": sum(losses[-20:]) / len(losses[-20:]),
        "loss_per_20_steps": [round(sum(losses[i : i + 20]) / len(losses[i : i + 20]), 4)
                              for i in range(0, len(losses), 20)],
    }
    if args.save:
        save_hf_folder(masters, eng.hf_config, cfg.model, args.save)
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
