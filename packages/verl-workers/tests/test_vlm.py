"""Vision-language rows end to end on a tiny Qwen2-VL: dataset -> DataProto -> engine / rollout.

The reference everywhere is the model's own forward on the processor's output for one row (no
padding, no precomputed positions: the model derives its M-RoPE ids itself from
``mm_token_type_ids``), so the dataset's 3-D position ids, the left padding, the per-row
``multi_modal_inputs`` and the mixing of image and text-only rows are all checked against it.
"""


import pytest
import torch
from verl.workers.tiny_vlm import image_rows, png

ROWS = image_rows()  # images of different sizes (-> different grids and token counts) and a text-only row


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    from verl.workers.tiny_vlm import build_tiny_qwen2_vl

    path = tmp_path_factory.mktemp("tiny_qwen2_vl")
    build_tiny_qwen2_vl(path, seed=0)
    return str(path)


@pytest.fixture(scope="module")
def processor(vlm_dir):
    from verl.workers.tokenizer import hf_processor

    return hf_processor(vlm_dir)


@pytest.fixture(scope="module")
def model(vlm_dir):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(vlm_dir).eval()


@pytest.fixture(scope="module")
def dataset(processor, tmp_path_factory):
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.dataset.rows import write_parquet

    rows = [{**r, "data_source": "t", "reward_model": {"ground_truth": "1"}} for r in ROWS]
    path = write_parquet(rows, tmp_path_factory.mktemp("vlm_data") / "rows.parquet")
    return RLHFDataset(str(path), processor.tokenizer, {"max_prompt_length": 64}, processor=processor)


def _direct(processor, model, i, extra_ids=None):
    """The model's own forward on the processor output of row i (optionally with appended tokens)."""
    from verl.utils.dataset.vision import build_vl_messages, load_image

    row = ROWS[i]
    images = [load_image(im, "test") for im in row["images"] or []]
    text = processor.apply_chat_template(
        build_vl_messages(row["prompt"], len(images), "test"), add_generation_prompt=True, tokenize=False
    )
    inputs = processor(text=[text], images=images or None, return_tensors="pt")
    if extra_ids is not None:
        inputs["input_ids"] = torch.cat([inputs["input_ids"], extra_ids[None]], dim=1)
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
        inputs["mm_token_type_ids"] = torch.cat(
            [inputs["mm_token_type_ids"], torch.zeros_like(extra_ids)[None]], dim=1
        )
    with torch.no_grad():
        return inputs, model(**inputs).logits[0]


def test_dataset_items_match_processor_and_model_rope(dataset, processor, model):
    from verl.utils.dataset.rl_dataset import collate_fn

    items = [dataset[i] for i in range(len(ROWS))]
    batch = collate_fn(items)
    assert batch["position_ids"].shape == (4, 3, 64)
    grids = []
    for i, item in enumerate(items):
        inputs, _ = _direct(processor, model, i)
        n = inputs["input_ids"].shape[1]
        assert item["input_ids"][-n:].tolist() == inputs["input_ids"][0].tolist()
        mm = item["multi_modal_inputs"]
        if ROWS[i]["images"] is None:
            assert mm == {} and item["multi_modal_data"] == {}
            # text-only: the three axes are the plain positions
            assert item["position_ids"][:, -n:].tolist() == [list(range(n))] * 3
            continue
        torch.testing.assert_close(mm["pixel_values"], inputs["pixel_values"])
        assert mm["image_grid_thw"].tolist() == inputs["image_grid_thw"].tolist()
        grids += mm["image_grid_thw"].tolist()
        want, _ = model.model.get_rope_index(
            inputs["input_ids"], inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"]
        )
        assert item["position_ids"][:, -n:].tolist() == want[:, 0].tolist()
        assert (item["position_ids"][:, :-n] == 0).all()
    assert len({tuple(g) for g in grids}) == 4  # four different image sizes


def _rl_batch(dataset, response_len=5, seed=0):
    """The dataset's rows with random responses appended, as the rollout would hand them on."""
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    batch = collate_fn([dataset[i] for i in range(len(ROWS))])
    g = torch.Generator().manual_seed(seed)
    responses = torch.randint(10, 90, (len(ROWS), response_len), generator=g)
    pos = batch["position_ids"]
    resp_pos = pos[..., -1:] + torch.arange(1, response_len + 1)
    tensors = {
        "input_ids": torch.cat([batch["input_ids"], responses], dim=1),
        "attention_mask": torch.cat([batch["attention_mask"], torch.ones_like(responses)], dim=1),
        "position_ids": torch.cat([pos, resp_pos], dim=-1),
        "responses": responses,
    }
    non_tensors = {"multi_modal_inputs": batch["multi_modal_inputs"]}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def _actor(vlm_dir, *extra):
    from verl.trainer.config import load_config
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.engine.testing import actor_engine

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={vlm_dir}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "actor_rollout_ref.actor.optim.lr=1e-2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            *extra,
        ],
    )
    arr = cfg.actor_rollout_ref
    engine = actor_engine(arr, 10, grad_clip=arr.actor.grad_clip, freeze_vision=bool(arr.actor.freeze_vision_tower))
    return DataParallelPPOActor(arr.actor, engine, ppo_mini_batch_size_per_rank=4)


def test_engine_log_probs_equal_model_forward_on_mixed_batch(dist_world1, vlm_dir, dataset, processor, model):
    data = _rl_batch(dataset)
    data.meta_info["micro_batch_size"] = 3  # micro-batches [img, img, text] and [img+img]
    log_probs, _ = _actor(vlm_dir).compute_log_prob(data)
    r = data.batch["responses"].shape[1]
    for i in range(len(ROWS)):
        resp = data.batch["responses"][i]
        _, logits = _direct(processor, model, i, extra_ids=resp)
        want = torch.log_softmax(logits[-r - 1 : -1].float(), -1).gather(-1, resp[:, None])[:, 0]
        torch.testing.assert_close(log_probs[i], want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype_key", ["actor_rollout_ref.model.model_dtype", "actor_rollout_ref.actor.fsdp_config.model_dtype"])
def test_a_bf16_model_takes_the_processors_float32_pixels(dist_world1, vlm_dir, dataset, dtype_key):
    """The vision tower runs in the forward's dtype: bf16 weights get bf16 pixels (the processor makes float32)
    and the log-probs stay those of the fp32 model, to bf16's precision."""
    data = _rl_batch(dataset)
    want, _ = _actor(vlm_dir).compute_log_prob(data)
    got, _ = _actor(vlm_dir, f"{dtype_key}=bfloat16").compute_log_prob(data)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=0.15, rtol=0.05)


def test_freeze_vision_tower_trains_the_language_model_only(dist_world1, vlm_dir, dataset):
    data = _rl_batch(dataset, seed=1)
    actor = _actor(vlm_dir, "actor_rollout_ref.actor.freeze_vision_tower=true")
    module = actor.engine.module
    before = {k: v.detach().clone() for k, v in module.state_dict().items()}
    old, _ = actor.compute_log_prob(data)
    data.batch["old_log_probs"] = old
    data.batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None].expand_as(old).contiguous()
    actor.update_policy(data)
    after = module.state_dict()
    vis = [k for k in before if ".visual." in k]
    lm = [k for k in before if ".language_model." in k]
    assert vis and lm
    assert all(torch.equal(before[k], after[k]) for k in vis)
    assert any(not torch.equal(before[k], after[k]) for k in lm)
    assert not any(p.requires_grad for p in module.model.visual.parameters())


def test_hf_rollout_with_pixels_matches_model_generate(vlm_dir, dataset, processor, model):
    from verl import DataProto
    from verl.trainer.config import load_config
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.workers.rollout.hf_rollout import HFRollout

    cfg = load_config(
        [
            "actor_rollout_ref.rollout.response_length=6",
            "actor_rollout_ref.rollout.do_sample=false",
            "actor_rollout_ref.rollout.micro_batch_size=2",
        ],
    )
    rollout = HFRollout(model, cfg.actor_rollout_ref.rollout, processor.tokenizer, device="cpu", rank=0)
    batch = collate_fn([dataset[i] for i in range(len(ROWS))])
    prompts = DataProto.from_dict(
        tensors={k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")},
        non_tensors={"multi_modal_inputs": batch["multi_modal_inputs"]},
        meta_info={"do_sample": False},
    )
    out = rollout.generate_sequences(prompts)
    assert out.batch["position_ids"].shape[1:] == (3, 64 + out.batch["responses"].shape[1])
    for i in range(len(ROWS)):
        inputs, _ = _direct(processor, model, i)
        with torch.no_grad():
            gen = model.generate(
                **inputs, max_new_tokens=6, do_sample=False, eos_token_id=processor.tokenizer.eos_token_id
            )
        want = gen[0, inputs["input_ids"].shape[1] :].tolist()
        got = out.batch["responses"][i][out.batch["response_mask"][i].bool()].tolist()
        assert got == want


def test_bad_image_rows_name_the_row(processor, tmp_path):
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.dataset.rows import write_parquet

    rows = [
        {
            "prompt": [{"role": "user", "content": "no placeholder"}],
            "images": [{"bytes": png(56, 56, "red")}],
            "data_source": "t",
            "reward_model": {"ground_truth": "1"},
        }
    ]
    path = write_parquet(rows, tmp_path / "bad.parquet")
    ds = RLHFDataset(str(path), processor.tokenizer, {"max_prompt_length": 64}, processor=processor)
    with pytest.raises(ValueError, match=r"bad.parquet.*0 <image> placeholder\(s\) but the row has 1 image"):
        ds[0]


def test_images_are_resized_by_qwen_vl_utils_to_hand_derived_sizes():
    from PIL import Image
    from verl.utils.dataset.vision import load_image

    def size(w, h, lo, hi):
        return load_image(Image.new("RGB", (w, h), (255, 0, 0)), "test", min_pixels=lo, max_pixels=hi).size

    assert size(112, 56, 28 * 28, 112 * 112) == (112, 56)  # already multiples of 28, within bounds
    # 200x300 rounds to 196x308 (60368 px > 12544): scaled by sqrt(60000/12544) and floored to 28s
    assert size(200, 300, 28 * 28, 112 * 112) == (84, 112)
    # 10x10 is below 4*28*28 px: scaled up by sqrt(3136/100) = 5.6 and ceiled to 28s
    assert size(10, 10, 4 * 28 * 28, 10**6) == (56, 56)
    with pytest.raises(ValueError, match="test: .*aspect ratio"):
        size(500, 1, 28 * 28, 10**6)


def test_videos_load_through_qwen_vl_utils():
    from PIL import Image
    from verl.utils.dataset.vision import load_video

    frames = [Image.new("RGB", (60, 90), (10 * i, 0, 0)) for i in range(5)]
    video, fps = load_video(frames, "row 0: videos[0]", min_pixels=28 * 28, max_pixels=112 * 112)
    # 5 frames padded to a multiple of 2 (the last repeated). qwen-vl-utils first fetches each frame as an
    # image with its patch size set to the video's factor (28), i.e. to multiples of 56: 60x90 -> 56x112;
    # the video's own resize to multiples of 28 keeps that (6272 px within [784, 12544])
    assert tuple(video.shape) == (6, 3, 112, 56) and fps == 2.0
    assert torch.equal(video[5], video[4]) and not torch.equal(video[0], video[4])
    with pytest.raises(ValueError, match="row 0: videos\\[0\\]: a video must be"):
        load_video([], "row 0: videos[0]")


def test_image_rows_need_multi_modal_inputs(processor, tmp_path):
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.dataset.rows import write_parquet

    rows = [{**ROWS[0], "data_source": "t", "reward_model": {"ground_truth": "1"}}]
    path = write_parquet(rows, tmp_path / "rows.parquet")
    cfg = {"max_prompt_length": 64, "return_multi_modal_inputs": False}
    ds = RLHFDataset(str(path), processor.tokenizer, cfg, processor=processor)
    with pytest.raises(ValueError, match="return_multi_modal_inputs=false"):
        ds[0]


def test_hf_rollout_never_samples_image_placeholders(vlm_dir, dataset, processor):
    from transformers import AutoModelForImageTextToText
    from verl import DataProto
    from verl.trainer.config import load_config
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.workers.rollout.hf_rollout import HFRollout

    cfg = load_config(["actor_rollout_ref.rollout.response_length=4", "actor_rollout_ref.rollout.temperature=1.0"])
    model = AutoModelForImageTextToText.from_pretrained(vlm_dir).eval()  # its own copy: edited below
    rollout = HFRollout(model, cfg.actor_rollout_ref.rollout, processor.tokenizer, device="cpu", rank=0)
    assert rollout.suppress_ids == [model.config.image_token_id, model.config.video_token_id]
    batch = collate_fn([dataset[0]] * 64)
    prompts = DataProto.from_dict(
        tensors={k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")},
        non_tensors={"multi_modal_inputs": batch["multi_modal_inputs"]}, meta_info={"do_sample": True},
    )
    # make the placeholder by far the likeliest token: without suppression every draw would be it
    boost = torch.zeros(model.config.text_config.vocab_size)
    boost[model.config.image_token_id] = 100.0
    model.lm_head.register_forward_hook(lambda mod, inp, out: out + boost)
    out = rollout.generate_sequences(prompts)
    assert not torch.isin(out.batch["responses"], torch.tensor(rollout.suppress_ids)).any()
