"""Fixtures shared by every package's tests (pytest picks this file up from the repo root)."""

import importlib.util
import os

import pytest

# Keep torch from oversubscribing the 2 cores when Ray workers and the driver all compute.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Under `uv run`, Ray would otherwise re-create the uv environment for every worker (tens of seconds each).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def pytest_addoption(parser):
    parser.addoption(
        "--config-audit-recipes",
        action="store_true",
        help="tests/test_config_audit.py: audit every recipe's entry point there too (CI audits each recipe "
        "in its own package's entry: recipes/<name>/tests/test_config_audit.py)",
    )


def _config_audit_script():
    """``scripts/config_audit.py`` as the module ``config_audit`` (its sibling scripts import it by that name)."""
    import sys
    from pathlib import Path

    if "config_audit" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "config_audit", Path(__file__).resolve().parent / "scripts" / "config_audit.py"
        )
        sys.modules["config_audit"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["config_audit"])
    return sys.modules["config_audit"]


@pytest.fixture(scope="session")
def _config_audit_assets(tmp_path_factory):
    return tmp_path_factory.mktemp("config_audit_assets")


@pytest.fixture
def config_audit(tmp_path, _config_audit_assets):
    """``config_audit(name)``: the read-or-refused audit of one entry point (``scripts/config_audit.py``), every
    group, in ``tmp_path``; fails listing each key that was set and never read, or a group that did not run.
    Each recipe's own tests call it for the recipe's CPU default, so its CI entry (the recipe's exact
    environment) runs it; tests/test_config_audit.py calls it for main_ppo. The audits of one session share
    their tiny assets (core's task and model, a recipe's warm start), each built once."""
    audit = _config_audit_script()

    def check(name: str) -> None:
        results = audit.audit([name], tmp_path, assets_root=_config_audit_assets)
        report = audit.render(results)
        print(report)
        assert results, f"no config-audit entry point named {name!r}"
        assert all(not r.error and not r.unread for r in results), report

    return check


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster per test session. Resource counts are logical: 8 'CPUs' on 2 cores lets
    tests spawn several fractional-CPU workers without waiting for each other."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        from verl.utils.ray_start import init_ray

        # On an overloaded machine Ray's raylet can miss its hard-coded 30 s start-up window; that is
        # not what any test checks, so start it again (5 attempts in all) before failing.
        init_ray(
            attempts=5,
            num_cpus=8,
            include_dashboard=False,
            log_to_driver=True,
            configure_logging=False,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}},
        )
    yield ray
    ray.shutdown()


@pytest.fixture
def vllm_installed(monkeypatch):
    """Validate as where vLLM (a GPU package, not installed here) and every other optional package are:
    a recipe's GPU config then has only the GPU to miss."""
    from verl.trainer.config import installed

    monkeypatch.setattr(installed, "_missing", lambda module: False)


@pytest.fixture
def fails_only_for_the_gpu():
    """``check(validate, cfg)``: ``validate(cfg)`` raises a ConfigError and every problem it names is one a
    GPU setting has on this CPU machine: an offload flag that means nothing on CPU, or vLLM (a GPU
    package) not installed."""

    def check(validate, cfg) -> None:
        from verl.trainer.config import ConfigError

        with pytest.raises(ConfigError) as ei:
            validate(cfg)
        gpu_only = ("means nothing on CPU", "pip install 'verl-workers[vllm]'")
        problems = ei.value.problems
        assert problems and all(any(g in p for g in gpu_only) for p in problems), problems

    return check


@pytest.fixture
def config_error_names():
    """``check(validate, cfg, parts)``: ``validate(cfg)`` raises a ConfigError whose message contains every
    one of ``parts``; returns the message."""

    def check(validate, cfg, parts) -> str:
        from verl.trainer.config import ConfigError

        with pytest.raises(ConfigError) as ei:
            validate(cfg)
        text = str(ei.value)
        for part in parts:
            assert part in text, (part, text)
        return text

    return check


@pytest.fixture
def no_demo_assets(monkeypatch):
    """Core's demo assets (the built-in task and warm-started model) fail the test if anything builds them:
    a bad config must be refused before minutes of building."""
    import verl.trainer.demo as demo

    monkeypatch.setattr(demo, "warm_started_assets", lambda *a, **k: pytest.fail("assets built for a bad config"))


@pytest.fixture
def recipe_run(tmp_path):
    """``run(recipe, steps, *overrides) -> (metrics, rows, out)``: a recipe's smoke run, ``recipe.train`` on
    its CPU default for ``steps`` steps into ``out = tmp_path / "run"``; checked: it reached the last step
    and its tracker wrote the reward curve. ``rows``: the tracker's rows (``out/metrics.jsonl``)."""
    import json

    def run(recipe, steps: int, *overrides: str):
        out = tmp_path / "run"
        metrics = recipe.train(
            [f"trainer.total_training_steps={steps}", f"trainer.default_local_dir={out}", *overrides]
        )
        assert metrics["training/global_step"] == steps
        assert (out / "reward_curve.png").is_file()
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return metrics, rows, out

    return run


def _live_placement_group_ids() -> set[str]:
    from ray.util.placement_group import placement_group_table

    return {pg_id for pg_id, info in placement_group_table().items() if info["state"] != "REMOVED"}


@pytest.fixture(scope="module", autouse=True)
def _release_ray_resources_per_module():
    """Worker groups hold placement groups until the driver exits; in one long test session those of
    finished modules would starve later ones of (logical) CPUs. After each module, remove the placement
    groups it created, which also ends the worker actors scheduled in them."""
    import sys

    ray = sys.modules.get("ray")
    before = _live_placement_group_ids() if ray is not None and ray.is_initialized() else set()
    yield
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    for pg_id in _live_placement_group_ids() - before:
        remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(config, items):
    """A test that runs a config audit (the ``config_audit`` fixture: one run per group) is ``slow`` and ``e2e``
    with a longer timeout, wherever it is written. Tests marked ``vllm`` run only where vLLM is installed
    (envs/vllm-cpu); the main environment never installs or imports it, so there they skip with the command
    that runs them."""
    for item in items:
        if "config_audit" in getattr(item, "fixturenames", ()):
            for mark in (pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(3600)):
                item.add_marker(mark)
    if importlib.util.find_spec("vllm") is not None:
        return
    skip = pytest.mark.skip(reason="needs vLLM: run envs/vllm-cpu/run-tests")
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(skip)
