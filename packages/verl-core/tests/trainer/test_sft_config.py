"""SFT config: YAML == schema defaults, unknown keys, validation messages, read-only result."""

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ReadonlyConfigError
from verl.trainer.config import ConfigError
from verl.trainer.sft import SFT_DEFAULTS_YAML, SFTConfig, load_sft_config, validate_sft_config


def test_yaml_matches_schema_defaults():
    assert OmegaConf.to_container(OmegaConf.load(SFT_DEFAULTS_YAML)) == OmegaConf.to_container(
        OmegaConf.structured(SFTConfig)
    )


def base(*extra):
    return ["data.train_files=t.parquet", "model.path=m", "trainer.device=cpu", *extra]


def test_overrides_and_read_only():
    cfg = load_sft_config(base("optim.lr=3e-3", "trainer.n_gpus_per_node=2", "data.train_batch_size=8"))
    validate_sft_config(cfg)
    assert cfg.optim.lr == 3e-3 and cfg.trainer.default_local_dir == "checkpoints/verl_sft/sft"
    with pytest.raises(ReadonlyConfigError):
        cfg.optim.lr = 1.0


def test_unknown_key_suggests():
    with pytest.raises(ConfigError, match="did you mean 'data.micro_batch_size_per_gpu'"):
        load_sft_config(base("data.micro_batch_size_per_gpus=2"))


def test_sizes_explained_in_user_terms():
    cfg = load_sft_config(base("data.train_batch_size=12", "trainer.n_gpus_per_node=8"))
    with pytest.raises(ConfigError, match=r"train_batch_size=12 conversations is not divisible by 8 workers"):
        validate_sft_config(cfg)
    cfg = load_sft_config(
        base("data.train_batch_size=16", "trainer.n_gpus_per_node=2", "data.micro_batch_size_per_gpu=3")
    )
    with pytest.raises(
        ConfigError, match=r"= 8 per worker, which is not divisible by data.micro_batch_size_per_gpu=3"
    ):
        validate_sft_config(cfg)


def test_missing_required_and_bad_choice_listed_together():
    cfg = load_sft_config(["model.strategy=ddp"])
    with pytest.raises(ConfigError) as e:
        validate_sft_config(cfg)
    msg = str(e.value)
    assert "data.train_files is required" in msg and "model.path is required" in msg
    assert "model.strategy='ddp' is not one of: fsdp2, fsdp" in msg


def test_ray_init_kwargs_workers_at_nice_0_and_user_env_wins(monkeypatch):
    from verl.trainer.sft_trainer import ray_init_kwargs

    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    kw = ray_init_kwargs(load_sft_config(base("ray_kwargs.ray_init.num_cpus=3")))
    assert kw["num_cpus"] == 3 and kw["include_dashboard"] is False
    assert kw["runtime_env"]["env_vars"]["RAY_worker_niceness"] == "0"
    assert kw["runtime_env"]["env_vars"]["TOKENIZERS_PARALLELISM"] == "false"
    monkeypatch.setenv(
        "RAY_worker_niceness", "7"
    )  # the driver's setting reaches Ray's raylet: not overridden
    assert "RAY_worker_niceness" not in ray_init_kwargs(load_sft_config(base()))["runtime_env"]["env_vars"]


def test_ray_init_kwargs_merge_the_users_runtime_env():
    from verl.trainer.sft_trainer import ray_init_kwargs

    cfg = load_sft_config(
        base(
            "+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS=3",
            "+ray_kwargs.ray_init.runtime_env.env_vars.RAY_worker_niceness=4",
            "+ray_kwargs.ray_init.runtime_env.working_dir=/tmp",
        )
    )
    kw = ray_init_kwargs(cfg)  # one runtime_env (ray.init would refuse a second one)
    assert kw["runtime_env"]["working_dir"] == "/tmp"
    assert kw["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] == "3"
    assert kw["runtime_env"]["env_vars"]["RAY_worker_niceness"] == "4"


def test_local_backend_needs_one_worker_and_backend_names_are_checked():
    cfg = load_sft_config(base("trainer.worker_backend=local", "trainer.n_gpus_per_node=2", "data.train_batch_size=8"))
    with pytest.raises(ConfigError, match=r"worker_backend=local runs one worker .*nnodes\*n_gpus_per_node=1\*2=2"):
        validate_sft_config(cfg)
    cfg = load_sft_config(base("trainer.worker_backend=mpi", "trainer.n_gpus_per_node=1", "data.train_batch_size=8"))
    with pytest.raises(ConfigError, match="trainer.worker_backend='mpi' is not one of: ray, local"):
        validate_sft_config(cfg)
    cfg = load_sft_config(base("trainer.worker_backend=local", "trainer.n_gpus_per_node=1", "data.train_batch_size=8"))
    validate_sft_config(cfg)
