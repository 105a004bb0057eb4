"""The SFT worker: its loss is the plain-torch masked cross-entropy; SFT through Ray learns, saves a HF
folder whose weights are the trained ones, and resumes exactly where it stopped."""

import json

import pytest
import torch
from verl import DataProto
from verl.trainer.sft import load_sft_config, validate_sft_config
from verl.utils.dataset.sft_dataset import SFTDataset, sft_collate_fn


def write_chats(path, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    with open(path, "w") as f:
        for i in range(n):
            a, b = (int(x) for x in torch.randint(0, 50, (2,), generator=g))
            msgs = [{"role": "user", "content": f"{a}+{b}="}, {"role": "assistant", "content": str(a + b)}]
            if i % 3 == 0:  # some multi-turn rows with a system prompt
                msgs = [{"role": "system", "content": "add"}] + msgs + [
                    {"role": "user", "content": "again"}, {"role": "assistant", "content": str(a + b)}]
            f.write(json.dumps({"messages": msgs}) + "\n")
    return str(path)


def sft_cfg(model_dir, data, out, *extra):
    cfg = load_sft_config([
        f"data.train_files={data}", f"model.path={model_dir}", "trainer.device=cpu", "trainer.n_gpus_per_node=1",
        "data.train_batch_size=4", "data.micro_batch_size_per_gpu=2", "model.enable_gradient_checkpointing=false",
        "optim.lr=1e-2", "optim.lr_warmup_steps=0", "optim.lr_scheduler_type=constant",
        f"trainer.default_local_dir={out}", "trainer.progress_bar=false", *extra,
    ])
    validate_sft_config(cfg)
    return cfg


def plain_nll(model, batch):
    """Token-mean cross-entropy of the targets loss_mask selects, written directly."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    mask = batch["loss_mask"][:, 1:].float()
    return float((-(logp * mask).sum() / mask.sum()).detach())


def test_train_batch_loss_is_masked_cross_entropy(dist_world1, tiny_model_dir, tiny_tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM
    from verl.workers.sft_worker import SFTWorker

    data = write_chats(tmp_path / "d.jsonl", 4)
    cfg = sft_cfg(tiny_model_dir, data, tmp_path / "out")
    ds = SFTDataset(data, tiny_tokenizer, cfg.data)
    batch = sft_collate_fn([ds[i] for i in range(4)], pad_token_id=ds.pad_token_id)
    expected = plain_nll(AutoModelForCausalLM.from_pretrained(tiny_model_dir), batch)

    worker = SFTWorker(cfg, total_training_steps=10)
    worker.init_model()
    tokens = int(batch["loss_mask"][:, 1:].sum())
    before = worker.eval_batch(DataProto.from_dict(tensors=batch)).meta_info["metrics"]
    assert before["val/nll_sum"] / before["val/tokens"] == pytest.approx(expected, rel=1e-5)
    assert before["val/tokens"] == tokens
    out = worker.train_batch(DataProto.from_dict(tensors=batch, meta_info={"global_tokens": tokens}))
    assert out.meta_info["metrics"]["train/loss"] == pytest.approx(expected, rel=1e-5)
    after = worker.eval_batch(DataProto.from_dict(tensors=batch)).meta_info["metrics"]
    assert after["val/nll_sum"] / after["val/tokens"] < expected - 0.1



def test_bf16_sft_computes_in_bf16_steps_fp32_masters_and_saves_them(dist_world1, tiny_model_dir, tiny_tokenizer,
                                                                     tmp_path):
    """model.model_dtype=bfloat16 in SFT: the loss is a bf16 model's (computed here directly, and not
    fp32's), the parameters, gradients and AdamW state are fp32, and the saved Hugging Face folder
    holds the fp32 masters bit for bit (before the fix it held them rounded to bf16)."""
    from transformers import AutoModelForCausalLM
    from verl.workers.sft_worker import SFTWorker

    data = write_chats(tmp_path / "d.jsonl", 4)
    cfg = sft_cfg(tiny_model_dir, data, tmp_path / "out", "model.model_dtype=bfloat16")
    ds = SFTDataset(data, tiny_tokenizer, cfg.data)
    batch = sft_collate_fn([ds[i] for i in range(4)], pad_token_id=ds.pad_token_id)
    bf16_model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    expected = plain_nll(bf16_model, batch)
    assert expected != pytest.approx(plain_nll(AutoModelForCausalLM.from_pretrained(tiny_model_dir), batch), rel=1e-5)

    worker = SFTWorker(cfg, total_training_steps=10)
    worker.init_model()
    engine = worker.engine
    # the masters start from the bf16 load, upcast (the values a bf16 model holds), and are fp32
    start = engine.full_state_dict()
    for k, v in bf16_model.state_dict().items():
        assert start[k].dtype == torch.float32 and torch.equal(start[k], v.float()), k
    tokens = int(batch["loss_mask"][:, 1:].sum())
    for step in range(3):
        out = worker.train_batch(DataProto.from_dict(tensors=batch, meta_info={"global_tokens": tokens}))
        if step == 0:
            assert out.meta_info["metrics"]["train/loss"] == pytest.approx(expected, rel=1e-5)
    assert out.meta_info["metrics"]["train/loss"] < expected - 0.1
    assert {p.dtype for p in engine.module.parameters()} == {torch.float32}
    assert {v.dtype for st in engine.optimizer.state.values() for v in st.values() if v.dim()} == {torch.float32}
    masters = engine.full_state_dict()
    w = masters["model.layers.0.mlp.up_proj.weight"]
    assert (w.to(torch.bfloat16).float() != w).float().mean() > 0.5  # off the bf16 grid: the test can fail

    folder = worker.save_hf_model(str(tmp_path / "hf"))
    saved = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
    for k, v in saved.items():
        assert torch.equal(v, masters[k]), k


@pytest.mark.slow
def test_sft_through_ray_learns_saves_hf_and_resumes(ray_cluster, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.trainer.sft.trainer import SFTTrainer

    data = write_chats(tmp_path / "train.jsonl", 32)
    out = tmp_path / "out"
    common = ("trainer.n_gpus_per_node=2", "data.train_batch_size=8", "data.micro_batch_size_per_gpu=2",
              f"data.val_files={data}", "trainer.logger=[jsonl]", "trainer.save_freq=3")
    cfg = sft_cfg(tiny_model_dir, data, out, "trainer.total_training_steps=3", *common)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ds = SFTDataset(data, tok, cfg.data)
    first = SFTTrainer(cfg, ds, ds).fit()
    assert first["checkpoint"].endswith("global_step_3")

    # A second run with a larger budget resumes from step 3 and continues to 6.
    cfg6 = sft_cfg(tiny_model_dir, data, out, "trainer.total_training_steps=6", *common)
    result = SFTTrainer(cfg6, ds, ds).fit()
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[-1]["train/loss"] < rows[0]["train/loss"] - 0.5
    assert (out / "config.yaml").read_text().count("total_training_steps: 6") == 1

    # The HF folder holds the trained weights and the tokenizer: its NLL on the data is the trainer's val/loss.
    hf = result["hf_model"]
    model = AutoModelForCausalLM.from_pretrained(hf)
    tok2 = AutoTokenizer.from_pretrained(hf)
    assert tok2.apply_chat_template([{"role": "user", "content": "1+1="}], tokenize=False) == tok.apply_chat_template(
        [{"role": "user", "content": "1+1="}], tokenize=False)
    batch = sft_collate_fn([ds[i] for i in range(len(ds))], pad_token_id=ds.pad_token_id)
    with torch.no_grad():
        assert plain_nll(model, batch) == pytest.approx(rows[-1]["val/loss"], rel=1e-4)
