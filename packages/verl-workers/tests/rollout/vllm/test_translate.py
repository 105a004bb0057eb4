"""The vLLM rollout's config and request translation (no vLLM needed: runs in the main environment)."""

import importlib.util

import pytest
import torch
from verl.trainer.config import load_config
from verl.workers.rollout.hf_rollout import SamplingParams
from verl.workers.rollout.vllm_rollout import translate
from verl.workers.rollout.vllm_rollout.worker_extension import layer_group, metas_from_wire, metas_to_wire
from verl.workers.rollout.weight_sync import iter_weight_buckets, receive_state_dict


def rollout_cfg(*overrides):
    return load_config(
        ["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.name=vllm", *overrides],
    ).actor_rollout_ref.rollout


def test_every_rollout_key_reaches_the_engine_under_vllms_name():
    cfg = rollout_cfg(
        "data.max_prompt_length=10",
        "data.max_response_length=6",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "actor_rollout_ref.rollout.max_num_batched_tokens=512",
        "actor_rollout_ref.rollout.max_num_seqs=7",
        "actor_rollout_ref.rollout.enforce_eager=false",
        "actor_rollout_ref.rollout.enable_chunked_prefill=false",
        "actor_rollout_ref.rollout.enable_prefix_caching=false",
        "actor_rollout_ref.rollout.load_format=auto",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=1234",
    )
    kw = translate.engine_kwargs(cfg, "/m", trust_remote_code=True, device_type="cpu", seed=45)
    assert kw == {
        "model": "/m",
        "dtype": "float32",
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.3,
        "max_num_batched_tokens": 512,
        "max_model_len": 16,
        "max_num_seqs": 7,
        "enforce_eager": False,
        "enable_chunked_prefill": False,
        "enable_prefix_caching": False,
        "load_format": "auto",
        "enable_sleep_mode": False,
        "seed": 45,
        "trust_remote_code": True,
        "logprobs_mode": "processed_logprobs",
        "skip_tokenizer_init": True,
        "worker_extension_cls": translate.WORKER_EXTENSION,
        "kv_cache_memory_bytes": 1234,
    }
    # sleep mode only where vLLM has it (GPU), and only with free_cache_engine
    assert translate.engine_kwargs(cfg, "/m", trust_remote_code=False, device_type="cuda", seed=0)[
        "enable_sleep_mode"
    ]
    off = rollout_cfg("actor_rollout_ref.rollout.free_cache_engine=false")
    assert not translate.engine_kwargs(off, "/m", trust_remote_code=False, device_type="cuda", seed=0)[
        "enable_sleep_mode"
    ]
    assert (
        translate.engine_kwargs(
            rollout_cfg("actor_rollout_ref.rollout.max_model_len=99"),
            "/m",
            trust_remote_code=False,
            device_type="cpu",
            seed=0,
        )["max_model_len"]
        == 99
    )


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["actor_rollout_ref.rollout.tensor_model_parallel_size=2"], "tensor_model_parallel_size=2"),
        (["actor_rollout_ref.rollout.micro_batch_size=4"], "rollout.micro_batch_size=4"),
        (["+actor_rollout_ref.rollout.engine_kwargs.swap_space=4"], "engine_kwargs.vllm.swap_space"),
        (
            ["+actor_rollout_ref.rollout.engine_kwargs.vllm.seed=3"],
            "engine_kwargs.vllm.seed is set by rollout.seed",
        ),
        (["+actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len=3"], "set by rollout.max_model_len"),
        (
            [
                "actor_rollout_ref.rollout.calculate_log_probs=true",
                "actor_rollout_ref.rollout.temperature=0.7",
                "actor_rollout_ref.rollout.top_p=0.9",
            ],
            "temperature=0.7, top_k=-1, top_p=0.9",
        ),
    ],
)
def test_settings_vllm_would_not_honour_are_refused(overrides, needle):
    with pytest.raises(ValueError, match="vllm rollout config") as e:
        translate.check_config(rollout_cfg(*overrides))
    assert needle in str(e.value)


def test_defaults_and_honourable_settings_pass():
    translate.check_config(rollout_cfg())
    translate.check_config(
        rollout_cfg(
            "actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.rollout.temperature=0.7"
        )
    )
    translate.check_config(
        rollout_cfg("actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.rollout.top_k=5")
    )


def test_log_prob_mode_gives_the_contracts_values_or_says_why_not():
    # training samples without filters: processed (after temperature) log-probs
    assert translate.logprobs_mode(rollout_cfg()) == translate.LOGPROBS_PROCESSED
    assert translate.logprobs_mode(rollout_cfg("actor_rollout_ref.rollout.top_k=5")) == translate.LOGPROBS_RAW
    proc, raw = translate.LOGPROBS_PROCESSED, translate.LOGPROBS_RAW
    sp = lambda **k: SamplingParams(response_length=4, **k)  # noqa: E731
    assert translate.log_probs_unavailable(sp(temperature=0.7), proc) is None
    assert translate.log_probs_unavailable(sp(temperature=1.0, top_k=5), raw) is None
    assert "top_k=5" in translate.log_probs_unavailable(sp(temperature=1.0, top_k=5), proc)
    assert "temperature=0.7" in translate.log_probs_unavailable(sp(temperature=0.7), raw)
    assert translate.log_probs_unavailable(sp(do_sample=False, temperature=1.0), proc) is None
    assert "greedy" in translate.log_probs_unavailable(sp(do_sample=False, temperature=0.5), proc)


def test_sampling_kwargs():
    sp = SamplingParams(response_length=5, temperature=0.7, top_k=3, top_p=0.9)
    kw = translate.sampling_kwargs(sp, [1, 3], ignore_eos=False, log_probs=True)
    assert kw == {
        "n": 1,
        "max_tokens": 5,
        "temperature": 0.7,
        "top_k": 3,
        "top_p": 0.9,
        "stop_token_ids": [1, 3],
        "ignore_eos": False,
        "logprobs": 0,
        "detokenize": False,
    }
    greedy = translate.sampling_kwargs(
        SamplingParams(response_length=2, do_sample=False, top_k=3), [1], ignore_eos=True, log_probs=False
    )
    assert (greedy["temperature"], greedy["top_k"], greedy["top_p"]) == (0.0, 0, 1.0)
    assert greedy["stop_token_ids"] == [] and greedy["ignore_eos"] and greedy["logprobs"] is None
    assert "seed" not in kw  # a per-request seed would make the n copies of a prompt identical


def test_prompt_rows_and_assemble_batch():
    ids = torch.tensor([[0, 0, 7, 8], [5, 6, 7, 8]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    pos = torch.tensor([[0, 0, 0, 1], [0, 1, 2, 3]])
    assert translate.prompt_rows(ids, mask) == [[7, 8], [5, 6, 7, 8]]
    outs = [
        translate.RowOutput([9, 1], [-0.5, -0.25], "stop"),
        translate.RowOutput([4, 4, 4], [-1.0, -2.0, -3.0], "length"),
    ]
    b = translate.assemble_batch(ids, mask, pos, outs, pad_token_id=0, with_log_probs=True)
    assert b["responses"].tolist() == [[9, 1, 0], [4, 4, 4]]
    assert b["response_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert b["input_ids"].tolist() == [[0, 0, 7, 8, 9, 1, 0], [5, 6, 7, 8, 4, 4, 4]]
    assert b["attention_mask"].tolist() == [[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]]
    assert b["position_ids"].tolist() == [[0, 0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6]]
    assert b["rollout_log_probs"].tolist() == [[-0.5, -0.25, 0.0], [-1.0, -2.0, -3.0]]
    assert "rollout_log_probs" not in translate.assemble_batch(ids, mask, pos, outs, 0, with_log_probs=False)
    with pytest.raises(ValueError, match="row 0: 2 tokens"):
        translate.assemble_batch(
            ids, mask, pos, [translate.RowOutput([9, 1], None, "stop"), outs[1]], 0, True
        )


def test_bucket_metadata_crosses_the_process_boundary_as_plain_lists():
    torch.manual_seed(0)
    state = {
        "model.embed_tokens.weight": torch.randn(10, 4),
        "model.layers.0.mlp.up_proj.weight": torch.randn(3, 4),
        "mask": torch.tensor([True, False]),
        "h": torch.randn(5, dtype=torch.bfloat16),
    }
    wire = []
    for b in iter_weight_buckets(state.items(), 64):  # small: tensors are split across buckets
        metas = metas_to_wire(b.metas)
        assert all(isinstance(x, (str, int, list)) for m in metas for x in m)
        wire.append(
            type(b)(
                torch.frombuffer(bytearray(b.buffer.numpy().tobytes()), dtype=torch.uint8),
                metas_from_wire(metas),
            )
        )
    got = receive_state_dict(wire)
    assert got.keys() == state.keys() and all(torch.equal(got[k], v) for k, v in state.items())


def test_layer_group_keeps_decoder_layers_whole():
    assert layer_group("model.layers.3.self_attn.q_proj.weight") == "model.layers.3"
    assert layer_group("model.layers.3.mlp.down_proj.weight") == "model.layers.3"
    assert layer_group("model.embed_tokens.weight") == "model.embed_tokens"
    assert layer_group("lm_head.weight") == "lm_head"
    # Qwen2-VL: the language model's layers and the vision tower's blocks
    assert layer_group("model.language_model.layers.1.mlp.up_proj.weight") == "model.language_model.layers.1"
    assert layer_group("model.visual.blocks.0.attn.qkv.bias") == "model.visual.blocks.0"
    assert layer_group("model.visual.merger.mlp.0.weight") == "model.visual.merger.mlp.0"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_building_the_engine_says_what_to_install(tiny_model_dir):
    from transformers import AutoModelForCausalLM
    from verl.workers.rollout import build_rollout

    cfg = load_config(
        [f"actor_rollout_ref.model.path={tiny_model_dir}", "actor_rollout_ref.rollout.name=vllm"],
    ).actor_rollout_ref
    module = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with pytest.raises(ImportError, match=r"verl-workers\[vllm\]"):
        build_rollout("vllm", module=module, config=cfg.rollout, model_config=cfg.model)


# ---------------------------------------------------------------- vision-language rows
IMG, VID, VS, VE = 50, 51, 48, 49  # placeholder / vision start / end ids of a made-up vocabulary


def test_vllm_prompts_collapse_each_image_to_one_placeholder_and_carry_the_images():
    # row 0: two images of 4 and 2 features (expanded, as the dataset's processor writes them); row 1: text only
    row0 = [2, 7, VS, IMG, IMG, IMG, IMG, VE, 8, VS, IMG, IMG, VE, 9]
    row1 = [2, 7, 8]
    images = [object(), object()]
    got = translate.vllm_prompts([row0, row1], [{"image": images}, {}], {"image": IMG, "video": VID})
    assert got[0] == {
        "prompt_token_ids": [2, 7, VS, IMG, VE, 8, VS, IMG, VE, 9],
        "multi_modal_data": {"image": images},
    }
    assert got[1] == {"prompt_token_ids": [2, 7, 8]}
    # text models (no multi_modal_data column) pass ids untouched, placeholders or not
    assert translate.vllm_prompts([row0], None, {}) == [{"prompt_token_ids": row0}]
    # non-placeholder repeats stay
    assert translate.collapse_placeholders([7, 7, IMG, IMG, 7], [IMG]) == [7, 7, IMG, 7]


def test_vllm_prompts_refuse_rows_whose_images_and_placeholders_disagree():
    row = [2, VS, IMG, IMG, VE, 9]
    with pytest.raises(
        ValueError, match=r"row 0: 2 image item\(s\) in multi_modal_data but 1 image placeholder"
    ):
        translate.vllm_prompts([row], [{"image": [object(), object()]}], {"image": IMG})
    with pytest.raises(
        ValueError, match=r"row 0: multi_modal_data has \['image'\]; this model's placeholders cover \[\]"
    ):
        translate.vllm_prompts([row], [{"image": [object()]}], {})
    with pytest.raises(ValueError, match="1 multi_modal_data entries for 2 prompt rows"):
        translate.vllm_prompts([row, row], [{}], {"image": IMG})


def test_check_prompt_lengths_refuses_a_different_expansion():
    rows = [[1, 2, 3], [1, 2]]
    translate.check_prompt_lengths(
        rows, [translate.RowOutput([5], None, "stop", 3), translate.RowOutput([5], None, "stop")]
    )
    with pytest.raises(
        ValueError, match="row 1: vLLM expanded the prompt to 4 tokens, the dataset's processor to 2"
    ):
        translate.check_prompt_lengths(
            rows, [translate.RowOutput([5], None, "stop", 3), translate.RowOutput([5], None, "stop", 4)]
        )


def test_assemble_batch_continues_mrope_positions_on_every_axis():
    ids = torch.tensor([[0, 7, 8], [5, 7, 8]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    # M-RoPE ids [B, 3, P]: the axes differ inside an image and continue from their own last value
    pos = torch.tensor([[[0, 0, 1], [0, 0, 2], [0, 0, 3]], [[0, 1, 2], [0, 1, 1], [0, 1, 4]]])
    outs = [translate.RowOutput([9, 1], None, "stop"), translate.RowOutput([4], None, "length")]
    b = translate.assemble_batch(ids, mask, pos, outs, pad_token_id=0, with_log_probs=False)
    assert b["position_ids"].shape == (2, 3, 5)
    assert b["position_ids"][0].tolist() == [[0, 0, 1, 2, 3], [0, 0, 2, 3, 4], [0, 0, 3, 4, 5]]
    assert b["position_ids"][1].tolist() == [[0, 1, 2, 3, 4], [0, 1, 1, 2, 3], [0, 1, 4, 5, 6]]


def test_vision_language_engines_load_the_tokenizer_and_never_sample_placeholders():
    cfg = rollout_cfg()
    text = translate.engine_kwargs(cfg, "/m", trust_remote_code=False, device_type="cpu", seed=0)
    vl = translate.engine_kwargs(
        cfg, "/m", trust_remote_code=False, device_type="cpu", seed=0, multimodal=True
    )
    assert text["skip_tokenizer_init"] is True and vl["skip_tokenizer_init"] is False
    params = SamplingParams(do_sample=True, temperature=1.0, top_k=-1, top_p=1.0, response_length=4)
    kw = translate.sampling_kwargs(params, [1], ignore_eos=False, log_probs=True, suppress_ids=[IMG, VID])
    assert kw["logit_bias"] == {IMG: -100.0, VID: -100.0}
    assert "logit_bias" not in translate.sampling_kwargs(params, [1], ignore_eos=False, log_probs=True)
def test_the_synchronous_path_never_samples_placeholders_either(monkeypatch):
    """generate_sequences' SamplingParams carry the placeholders' logit_bias, as agenerate's do (a fake
    ``vllm`` module records what the rollout builds; the engine is not needed for this)."""
    import sys
    import types

    from verl.workers.rollout.vllm_rollout.vllm_rollout import VLLMRollout

    fake = types.ModuleType("vllm")
    fake.SamplingParams = lambda **kwargs: kwargs
    monkeypatch.setitem(sys.modules, "vllm", fake)
    rollout = object.__new__(VLLMRollout)  # only what building the request reads
    rollout.config, rollout.eos_token_ids, rollout.suppress_ids = rollout_cfg(), [1], [IMG, VID]
    params = SamplingParams(do_sample=True, temperature=1.0, top_k=-1, top_p=1.0, response_length=4)
    sync = rollout.vllm_sampling_params(params, log_probs=False)
    assert sync["logit_bias"] == {IMG: -100.0, VID: -100.0} and sync["stop_token_ids"] == [1]
    assert rollout.request_sampling_kwargs(params, True, [7])["logit_bias"] == sync["logit_bias"]  # async
    rollout.suppress_ids = []  # a text model
    assert "logit_bias" not in rollout.vllm_sampling_params(params, log_probs=False)


@pytest.mark.parametrize(("rank", "vllm_rank"), [(4, 8), (8, 8), (9, 16), (64, 64), (320, 320)])
def test_lora_adapter_sync_turns_on_vllms_lora_path(rank, vllm_rank):
    cfg = rollout_cfg("actor_rollout_ref.rollout.lora_sync=adapter")
    kw = translate.engine_kwargs(cfg, "/m", trust_remote_code=False, device_type="cpu", seed=1, lora_rank=rank)
    assert (kw["enable_lora"], kw["max_loras"], kw["max_lora_rank"]) == (True, 1, vllm_rank)
    plain = translate.engine_kwargs(cfg, "/m", trust_remote_code=False, device_type="cpu", seed=1)
    assert "enable_lora" not in plain
    with pytest.raises(ValueError, match="513 exceeds"):
        translate.vllm_max_lora_rank(513)
    # the LoRA engine keys belong to the rollout, not to engine_kwargs.vllm
    with pytest.raises(ValueError, match="engine_kwargs.vllm.max_lora_rank is set by"):
        translate.check_config(rollout_cfg("+actor_rollout_ref.rollout.engine_kwargs.vllm.max_lora_rank=8"))


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["actor_rollout_ref.rollout.lora_sync=adapter", "actor_rollout_ref.model.lora_rank=8"],
         "lora_sync=adapter needs vLLM's LoRA path \\(rollout.name=vllm\\); rollout.name='native'"),
        (["actor_rollout_ref.rollout.lora_sync=adapter", "actor_rollout_ref.rollout.name=vllm"],
         "lora_sync=adapter sends LoRA adapters to the rollout, but LoRA is off"),
        (["actor_rollout_ref.rollout.lora_sync=adapters"], "lora_sync='adapters' is not one of: merged, adapter"),
        (["actor_rollout_ref.rollout.lora_sync=adapter", "actor_rollout_ref.rollout.name=vllm",
          "actor_rollout_ref.model.lora_rank=1024"], "vLLM's LoRA path takes ranks up to 512"),
    ],
)
def test_lora_sync_settings_that_cannot_work_are_refused(tmp_path, overrides, needle):
    from verl.trainer.config import validate_config

    cfg = load_config([f"actor_rollout_ref.model.path={tmp_path}", "actor_rollout_ref.rollout.name=native",
                       *overrides])
    with pytest.raises(ValueError, match=needle):
        validate_config(cfg)
