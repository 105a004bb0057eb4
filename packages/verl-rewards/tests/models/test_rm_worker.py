"""The discriminative RM worker on a tiny Qwen2 sequence classifier built locally."""

import numpy as np
import pytest
import torch
from verl import DataProto

tiny = pytest.importorskip("verl.workers.tiny")
transformers = pytest.importorskip("transformers")

RM_TEMPLATE = "{% for m in messages %}{{ '### ' + m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}"
CHATS = [
    [{"role": "user", "content": "2+2="}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "10+5="}],
    [{"role": "user", "content": "7*6="}],
]
RESPONSES = ["4", "fifteen is 15", "42!"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    policy_dir = tmp_path_factory.mktemp("policy_tok")
    rm_dir = tmp_path_factory.mktemp("rm")
    policy_tok = tiny.build_char_tokenizer(policy_dir)
    rm_tok = tiny.build_char_tokenizer(rm_dir)
    rm_tok.chat_template = RM_TEMPLATE  # the RM expects another chat format than the policy
    rm_tok.save_pretrained(rm_dir)
    config = tiny.tiny_qwen2_config("xs", vocab_size=len(rm_tok))
    config.num_labels = 1
    torch.manual_seed(0)
    model = transformers.Qwen2ForSequenceClassification(config)
    model.save_pretrained(rm_dir)
    same_dir = tmp_path_factory.mktemp("rm_same")
    policy_tok.save_pretrained(same_dir)
    model.save_pretrained(same_dir)
    return policy_dir, rm_dir, same_dir, policy_tok, model.eval()


def _batch(tok):
    prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in CHATS]
    p_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    r_ids = [tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for r in RESPONSES]
    n, p, r = len(CHATS), max(map(len, p_ids)), max(map(len, r_ids)) + 2
    prompts_t = torch.full((n, p), tok.pad_token_id)
    resp_t = torch.full((n, r), tok.pad_token_id)
    attn = torch.zeros(n, p + r, dtype=torch.long)
    for i, (a, b) in enumerate(zip(p_ids, r_ids)):
        prompts_t[i, p - len(a) :] = torch.tensor(a)
        resp_t[i, : len(b)] = torch.tensor(b)
        attn[i, p - len(a) : p] = 1
        attn[i, p : p + len(b)] = 1
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts_t,
            "responses": resp_t,
            "input_ids": torch.cat([prompts_t, resp_t], 1),
            "attention_mask": attn,
            "response_mask": attn[:, p:].clone(),
        },
        non_tensors={"raw_prompt": np.array(CHATS + [None], dtype=object)[:n]},
    )
    return data, p_ids, r_ids


def _free_port() -> str:
    import socket

    with socket.socket() as s:  # a fixed port collides with other runs on a shared machine
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.fixture
def worker_env(monkeypatch):
    for k, v in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": _free_port(),
    }.items():
        monkeypatch.setenv(k, v)


def _single(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, 0].item()


def test_scores_land_on_the_last_response_token(dirs, worker_env):
    from verl.rewards.models.rm_worker import RewardModelWorker

    _, _, same_dir, policy_tok, model = dirs
    data, p_ids, r_ids = _batch(policy_tok)
    w = RewardModelWorker({"model": {"path": str(same_dir)}, "micro_batch_size_per_gpu": 2})
    w.init_model()
    assert w.input_tokenizer is None
    rm = w.compute_rm_score(data).batch["rm_scores"]
    assert rm.shape == data.batch["responses"].shape
    for i in range(len(CHATS)):
        want = _single(model, p_ids[i] + r_ids[i])  # one unpadded row: an independent forward
        assert rm[i, len(r_ids[i]) - 1].item() == pytest.approx(want, abs=1e-5)
        assert torch.count_nonzero(rm[i]).item() == 1


def test_runs_on_its_device_in_the_configured_dtype(dirs, worker_env):
    """``device`` from the trainer and ``model.fsdp_config.mixed_precision.param_dtype``: the model runs
    there in bf16, the scores come back as fp32 CPU tensors, near the fp32 model's (bf16 rounding)."""
    from verl.rewards.models.rm_worker import RewardModelWorker

    _, _, same_dir, policy_tok, model = dirs
    data, p_ids, r_ids = _batch(policy_tok)
    cfg = {"model": {"path": str(same_dir), "fsdp_config": {"mixed_precision": {"param_dtype": "bf16"}}}}
    w = RewardModelWorker(cfg, device="cpu")
    w.init_model()
    assert w.engine.device == torch.device("cpu")
    assert {p.dtype for p in w.engine.module.parameters()} == {torch.bfloat16}
    rm = w.compute_rm_score(data).batch["rm_scores"]
    assert rm.dtype == torch.float32 and rm.device.type == "cpu"
    for i in range(len(CHATS)):
        want = _single(model, p_ids[i] + r_ids[i])
        got = rm[i, len(r_ids[i]) - 1].item()
        assert got == pytest.approx(want, abs=0.05) and got != pytest.approx(want, abs=1e-6)


def test_different_tokenizer_retemplates_the_conversation(dirs, worker_env):
    from verl.rewards.models.rm_worker import RewardModelWorker

    policy_dir, rm_dir, _, policy_tok, model = dirs
    data, _, r_ids = _batch(policy_tok)
    w = RewardModelWorker({"model": {"path": str(rm_dir), "input_tokenizer": str(policy_dir)}})
    w.init_model()
    assert w.input_tokenizer is not None
    rm = w.compute_rm_score(data).batch["rm_scores"]
    rm_tok = transformers.AutoTokenizer.from_pretrained(rm_dir)
    for i, chat in enumerate(CHATS):
        text = (
            "".join(f"### {m['role']}: {m['content']}\n" for m in chat) + f"### assistant: {RESPONSES[i]}\n"
        )
        want = _single(model, rm_tok(text, add_special_tokens=False)["input_ids"])
        assert rm[i, len(r_ids[i]) - 1].item() == pytest.approx(want, abs=1e-5)


def test_manager_passes_rm_scores_through_or_adds_rule_scores(dirs):
    from verl.rewards.managers import NaiveRewardManager

    _, _, _, policy_tok, _ = dirs
    data, _, r_ids = _batch(policy_tok)
    rm = torch.zeros(data.batch["responses"].shape)
    for i, r in enumerate(r_ids):
        rm[i, len(r) - 1] = 0.25 * (i + 1)
    data.batch["rm_scores"] = rm
    data.non_tensor_batch["data_source"] = np.array(["arithmetic"] * 3, dtype=object)
    data.non_tensor_batch["reward_model"] = np.array(
        [{"ground_truth": g} for g in ["4", "15", "42"]], dtype=object
    )
    assert torch.equal(NaiveRewardManager(policy_tok, 0)(data), rm)
    combined = NaiveRewardManager(policy_tok, 0, combine_rm_scores=True)(data)
    rule = torch.zeros_like(rm)
    rule[0, len(r_ids[0]) - 1] = 1.0  # only "4" is an exact match
    torch.testing.assert_close(combined, rm + rule)


def test_missing_model_path_is_named(worker_env):
    from verl.rewards.models.rm_worker import RewardModelWorker

    with pytest.raises(ValueError, match="reward.reward_model.model.path"):
        RewardModelWorker({"model": {}}).init_model()


@pytest.mark.parametrize(
    "options",
    [
        {"use_dynamic_bsz": True, "forward_max_token_len_per_gpu": 40},
        {"use_dynamic_bsz": True, "forward_max_token_len_per_gpu": 40, "model": {"use_remove_padding": True}},
        {"strategy": "fsdp", "micro_batch_size_per_gpu": 1},
        {"max_length": 6},
    ],
    ids=["dynamic_bsz", "remove_padding", "fsdp1", "max_length"],
)
def test_engine_options_give_the_same_scores(dirs, worker_env, options):
    """Token budgets, packed sequences, FSDP1 and truncation: each score equals an independent forward."""
    from verl.rewards.models.rm_worker import RewardModelWorker

    _, _, same_dir, policy_tok, model = dirs
    data, p_ids, r_ids = _batch(policy_tok)
    model_options = dict(options.pop("model", {}), path=str(same_dir))
    w = RewardModelWorker({**options, "model": model_options})
    w.init_model()
    if options.get("use_dynamic_bsz"):
        groups = w._micro_batches([p + r for p, r in zip(p_ids, r_ids)])
        assert len(groups) > 1  # the 40-token budget splits the three rows
    assert w.engine.remove_padding == bool(model_options.get("use_remove_padding"))
    rm = w.compute_rm_score(data).batch["rm_scores"]
    keep = options.get("max_length")
    for i in range(len(CHATS)):
        seq = p_ids[i] + r_ids[i]
        want = _single(model, seq[-keep:] if keep else seq)
        assert rm[i, len(r_ids[i]) - 1].item() == pytest.approx(want, abs=1e-4)


def test_unsupported_options_are_refused():
    from verl.rewards.models.rm_worker import RewardModelWorker

    with pytest.raises(NotImplementedError, match="strategy='megatron'"):
        RewardModelWorker({"strategy": "megatron", "model": {"path": "x"}})
    with pytest.raises(ValueError, match="forward_max_token_len_per_gpu"):
        RewardModelWorker({"use_dynamic_bsz": True, "forward_max_token_len_per_gpu": 0, "model": {"path": "x"}})


def test_offload_flags_on_cpu_are_refused_by_the_engine(dirs, worker_env):
    from verl.rewards.models.rm_worker import RewardModelWorker

    _, _, same_dir, _, _ = dirs
    w = RewardModelWorker({"model": {"path": str(same_dir), "fsdp_config": {"param_offload": True}}})
    with pytest.raises(ValueError, match="param_offload"):
        w.init_model()


def test_score_goes_to_the_last_model_token_of_a_multi_turn_response(dirs, worker_env):
    from verl.rewards.models.rm_worker import RewardModelWorker

    _, _, same_dir, policy_tok, _ = dirs
    data, _, r_ids = _batch(policy_tok)
    mask = data.batch["response_mask"].clone()
    mask[0, len(r_ids[0]) - 1] = 0  # row 0's last token is an environment token
    data.batch["response_mask"] = mask
    w = RewardModelWorker({"model": {"path": str(same_dir)}})
    w.init_model()
    rm = w.compute_rm_score(data).batch["rm_scores"]
    assert rm[0, len(r_ids[0]) - 1] == 0 and rm[0, len(r_ids[0]) - 2] != 0
