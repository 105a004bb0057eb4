"""Validation of Ulysses sequence parallelism and the kernel flags, in the user's terms."""

import pytest
from verl.trainer.config import ConfigError, load_config, validate_config

REQUIRED = [
    "data.train_files=train.parquet",
    "actor_rollout_ref.model.path=/models/tiny",
    "trainer.device=cpu",
]


def _problems(*overrides):
    cfg = load_config([*REQUIRED, *overrides])
    with pytest.raises(ConfigError) as ei:
        validate_config(cfg)
    return ei.value.problems


def test_sequence_parallel_preconditions():
    problems = _problems(
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=3",
        "trainer.n_gpus_per_node=4",
        "actor_rollout_ref.actor.strategy=fsdp",
    )
    text = "\n".join(problems)
    assert "actor_rollout_ref.actor.ulysses_sequence_parallel_size=3 must divide the 4 workers" in text
    assert "is implemented for strategy fsdp2; actor_rollout_ref.actor.strategy is 'fsdp'" in text
    assert "set actor_rollout_ref.model.use_remove_padding=true" in text
    critic = "\n".join(
        _problems(
            "algorithm.adv_estimator=gae",
            "critic.ulysses_sequence_parallel_size=2",
            "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.model.use_remove_padding=true",
        )
    )
    assert (
        "critic.ulysses_sequence_parallel_size=2 splits packed sequences; set critic.model.use_remove_padding=true"
        in critic
    )


def test_sequence_parallel_sizes_use_data_parallel_ranks():
    # 4 workers in SP groups of 2 = 2 data-parallel ranks: 2 prompts x n=1 split as 1 trajectory each
    ok = load_config(
        [
            *REQUIRED,
            "trainer.n_gpus_per_node=4",
            "actor_rollout_ref.model.use_remove_padding=true",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        ]
    )
    validate_config(ok)
    text = "\n".join(
        _problems(
            "trainer.n_gpus_per_node=4",
            "actor_rollout_ref.model.use_remove_padding=true",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        )
    )
    assert (
        "4 workers / actor_rollout_ref.actor.ulysses_sequence_parallel_size=2 = 2 data-parallel ranks" in text
    )


def test_liger_is_refused_on_cpu():
    text = "\n".join(_problems("actor_rollout_ref.model.use_liger=true"))
    assert "use_liger=true needs a CUDA GPU" in text and "use_fused_kernels=true" in text


def test_liger_on_cuda_without_the_package_names_the_install(monkeypatch):
    import importlib.util

    from verl.trainer.config import scaling

    if importlib.util.find_spec("liger_kernel") is not None:
        pytest.skip("liger-kernel is installed here")
    monkeypatch.setattr(scaling, "resolve_device", lambda cfg: "cuda")
    text = "\n".join(_problems("actor_rollout_ref.model.use_liger=true"))
    # the port tool counts "<module>, which is not installed: <install line>" as an install, like vllm's
    assert "use_liger=true needs liger_kernel, which is not installed: pip install liger-kernel" in text


def test_remove_padding_is_refused_for_a_local_vision_language_model(tmp_path):
    """The packed forward cannot take M-RoPE positions: said at validation, from the folder's config.json
    (the worker would refuse it only at the first step's forward pass)."""
    import json

    vl, text = tmp_path / "vl", tmp_path / "text"
    for folder, cfg in ((vl, {"model_type": "qwen2_vl", "vision_config": {"depth": 1}}),
                        (text, {"model_type": "qwen2"})):  # fmt: skip
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg))
    on = "actor_rollout_ref.model.use_remove_padding=true"
    problems = _problems(on, f"actor_rollout_ref.model.path={vl}")
    assert [p for p in problems if "use_remove_padding" in p] == [
        f"{on}: the model at {vl} is a vision-language model, whose M-RoPE (3-D) position ids the packed "
        "forward does not support yet; set it to false"
    ]
    validate_config(load_config([*REQUIRED, on, f"actor_rollout_ref.model.path={text}"]))  # a text model: fine
    fused = _problems("actor_rollout_ref.model.use_fused_kernels=true", f"actor_rollout_ref.model.path={vl}")
    assert any(p.startswith(f"actor_rollout_ref.model.use_fused_kernels=true: the model at {vl} is a vision-language")
               for p in fused), fused  # fmt: skip


def test_torch_compile_true_is_refused_where_layers_cannot_be_compiled():
    compile_on = "actor_rollout_ref.actor.use_torch_compile=true"
    fsdp1 = _problems(compile_on, "actor_rollout_ref.actor.strategy=fsdp")
    assert fsdp1 == [
        "actor_rollout_ref.actor.use_torch_compile=true cannot be honoured with actor_rollout_ref.actor.strategy=fsdp "
        "(compiled decoder layers are wired into fsdp2); set it to false (or null: compiled where it can be)"
    ]
    lora = "\n".join(_problems(compile_on, "actor_rollout_ref.model.lora_rank=4"))
    assert "use_torch_compile=true cannot be honoured with LoRA" in lora
    # fsdp2 without Ulysses or LoRA (the defaults), and null anywhere, are accepted
    validate_config(load_config([*REQUIRED, compile_on]))
    validate_config(load_config([*REQUIRED, "actor_rollout_ref.actor.use_torch_compile=null",
                                 "actor_rollout_ref.actor.strategy=fsdp"]))
