"""``scripts/gpu_check``, kept working without a GPU.

- which wheels it carries: a hand-made lock (hand-derived answer) and the repository's own ``uv.lock``;
- the CPU dry run (``--device cpu --quick``) of the whole check, in a fresh virtual environment that
  mimics the GPU machine: only the packages on the machine's list (``scripts/gpucheck/machine_packages.txt``,
  symlinked from this workspace's environment; no Ray, no verl), with everything else arriving the way
  it does there, as a folder of wheels that the check installs with pip (the carried distributions,
  repacked from this environment at the lock's versions). Every section must pass and report.

What it cannot mimic: the machine's versions (torch 2.11, transformers 5.17 there) and CUDA.
"""

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from .by_path import ROOT, load_module

CHECK = ROOT / "scripts" / "gpucheck"


def _load(name: str):
    return load_module(CHECK / f"{name}.py", f"gpucheck_{name}")


def test_carried_set_from_a_hand_made_lock(tmp_path):
    """member -> b (not on the machine: carried) -> c (on the machine: not carried, nor its deps);
    b -> e only on Windows (not carried); member -> ray (excluded); member[x] -> f (an extra: carried)."""
    wheelset = _load("wheelset")
    lock = textwrap.dedent(
        """
        version = 1
        [[package]]
        name = "verl-core"
        version = "0.1.0"
        source = { editable = "packages/verl-core" }
        dependencies = [{ name = "b" }, { name = "ray" }]
        [[package]]
        name = "verl-workers"
        version = "0.1.0"
        source = { editable = "packages/verl-workers" }
        dependencies = [{ name = "verl-core" }]
        [package.optional-dependencies]
        megatron = [{ name = "f" }]
        [[package]]
        name = "verl-rewards"
        version = "0.1.0"
        source = { editable = "packages/verl-rewards" }
        dependencies = [{ name = "verl-core" }]
        [[package]]
        name = "trl"
        version = "9.9"
        source = { registry = "https://pypi.org/simple" }
        dependencies = [{ name = "c" }]
        wheels = [{ url = "https://x/trl-9.9-py3-none-any.whl", hash = "sha256:abc" }]
        [[package]]
        name = "b"
        version = "1.2"
        source = { registry = "https://pypi.org/simple" }
        dependencies = [{ name = "c" }, { name = "e", marker = "sys_platform == 'win32'" }]
        [[package]]
        name = "c"
        version = "3"
        source = { registry = "https://pypi.org/simple" }
        dependencies = [{ name = "d" }]
        [[package]]
        name = "d"
        version = "4"
        source = { registry = "https://pypi.org/simple" }
        [[package]]
        name = "e"
        version = "5"
        source = { registry = "https://pypi.org/simple" }
        [[package]]
        name = "f"
        version = "6"
        source = { registry = "https://pypi.org/simple" }
        [[package]]
        name = "ray"
        version = "2"
        source = { registry = "https://pypi.org/simple" }
        """
    )
    (tmp_path / "uv.lock").write_text(lock)
    pins = wheelset.carried_pins(tmp_path / "uv.lock", machine={"c"})
    assert [(p.name, p.version) for p in pins] == [("b", "1.2"), ("f", "6"), ("trl", "9.9")]
    assert pins[2].wheel_hashes == {"trl-9.9-py3-none-any.whl": "abc"}
    assert pins[0].via == "verl-core -> b"


def test_carried_set_of_this_repository():
    """From the real lock: what the check imports and the machine lacks, never Ray or what the machine has."""
    wheelset = _load("wheelset")
    pins = {wheelset.normalize(p.name): p for p in wheelset.carried_pins()}
    assert {"omegaconf", "megatron-core", "trl", "datasets", "math-verify"} <= set(pins)
    assert "ray" not in pins and not set(pins) & wheelset.machine_packages()
    assert not any(name.startswith("verl") for name in pins)
    for name, pin in pins.items():
        assert pin.version == importlib.metadata.version(name)  # the lock's version is what this env runs


# ------------------------------------------------------------------------------ the mimic machine
def _top_level_entries(dist) -> set[str]:
    tops = set()
    for f in dist.files or []:
        parts = Path(str(f)).parts
        if parts and parts[0] not in ("..", "__pycache__") and not parts[0].endswith(".pth"):
            tops.add(parts[0])
    return tops


def _with_dependencies(names: set[str], stop: set[str], normalize) -> set[str]:
    """``names`` and what their versions installed here require (not following ``stop``): the machine's
    packages come with the dependencies of their own versions, which may differ from this environment's."""
    from packaging.requirements import Requirement

    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen or name in stop:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # on the machine's list, not installed here
        seen.add(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(normalize(req.name))
    return seen


def _mimic_machine(venv: Path, allowed: set[str], normalize) -> Path:
    """A venv with pip whose site-packages links this environment's distributions named in ``allowed``."""
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    here = Path(importlib.metadata.distribution("torch").locate_file(""))
    for dist in importlib.metadata.distributions(path=[str(here)]):
        if normalize(dist.metadata["Name"]) not in allowed:
            continue
        for top in _top_level_entries(dist):
            link = site / top
            if not link.exists() and (here / top).exists():
                link.symlink_to(here / top)
    return python


def _repack(dist, out: Path, normalize) -> Path:
    """A wheel of an installed distribution: its files and metadata, its own tag (from its WHEEL file)."""
    root = Path(dist.locate_file(""))
    tag = next(line.split(":", 1)[1].strip() for line in dist.read_text("WHEEL").splitlines() if line.startswith("Tag:"))
    name = normalize(dist.metadata["Name"]).replace("-", "_")
    wheel = out / f"{name}-{dist.version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for f in dist.files or []:
            rel = Path(str(f))
            if rel.parts[0] == ".." or "__pycache__" in rel.parts or rel.name in ("RECORD", "INSTALLER", "direct_url.json"):
                continue
            if (root / rel).is_file():
                z.write(root / rel, str(rel))
        info = next(str(Path(str(f)).parts[0]) for f in dist.files if str(f).endswith(".dist-info/METADATA"))
        z.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(1500)
def test_cpu_dry_run_in_a_machine_like_environment(tmp_path):
    wheelset = _load("wheelset")
    carried = {wheelset.normalize(p.name) for p in wheelset.carried_pins()}
    stop = carried | {"ray"} | {n for n in wheelset.machine_packages() if n.startswith("verl")}
    allowed = _with_dependencies(wheelset.machine_packages() - stop, stop, wheelset.normalize)
    python = _mimic_machine(tmp_path / "venv", allowed, wheelset.normalize)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in sorted(carried):
        _repack(importlib.metadata.distribution(name), wheels, wheelset.normalize)
    # the machine has neither Ray nor our packages nor what the wheels bring
    probe = "import importlib.util as u; print([m for m in ('ray', 'verl', 'trl', 'omegaconf') if u.find_spec(m)])"
    assert subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "[]"

    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHON"] = str(python)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check"), "--device", "cpu", "--quick", "--out", str(out),
                           "--wheels", str(wheels), "--budget", "1300"], capture_output=True, text=True, env=env,
                          timeout=1450)
    report_file = out / "gpu_check.json"
    assert report_file.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(report_file.read_text())
    bad = {k: (v.get("status"), v.get("error"), v.get("log_tail", "")[-1500:]) for k, v in report["sections"].items()
           if v.get("status") != "ok"}
    assert not bad and proc.returncode == 0, bad or proc.stdout[-3000:]

    assert sorted(report["setup"]["wheels"]) == sorted(w.name for w in wheels.iterdir())
    sections = report["sections"]
    machine = sections["machine"]["checks"]
    assert machine["versions"]["ray"].startswith("not installed")
    assert machine["plugins"]["actor_rollout_ref"] == "ActorRolloutRefWorker"
    assert str(ROOT / "packages" / "verl-core" / "src") in machine["plugins"]["verl_paths"][0]
    tests = sections["gpu_tests"]["checks"]["pytest -m gpu"]
    assert tests["skipped"] >= 3 and tests["passed"] == 0  # CUDA-only: they skip here, and were collected
    assert set(sections["correctness"]["checks"]) == {
        "fsdp2_bf16_fp32_masters", "rollouts_bfloat16", "rollout_vs_actor_native_bfloat16",
        "rollout_vs_actor_hf_bfloat16", "checkpoint_resume"}
    assert sections["megatron"]["checks"]["megatron_tp1_vs_fsdp2_float32"]["status"] == "ok"
    e2e = sections["e2e"]["checks"]["demo_sft_then_grpo"]
    assert not e2e["ray_imported"] and e2e["rl_steps"] == 2
    speed = sections["speed"]["checks"]["quick-a"]["lengths"]
    for length in ("8", "16"):
        for impl in ("ours", "trl"):
            assert speed[length][impl]["response_tokens"] == 64 * int(length)  # fixed lengths, 64 sequences
        assert speed[length]["ours_over_trl_step"] > 0
    table = (out / "gpu_check.md").read_text()
    assert "| quick-a | 16 | trl |" in table and "## Correctness on the device" in table
    assert (out / "gpu_check.log").stat().st_size > 0

    # the tables as a GPU run's report renders them (card, datasheet peak, MFU): made from this report
    tables = _load("tables")
    gpu_like = json.loads(report_file.read_text())
    gpu_like["device"] = "cuda"
    gpu_like["sections"]["machine"]["checks"]["gpu"].update(
        name="NVIDIA H100 80GB HBM3", driver="580.0", memory_gib=79.2, dense_bf16_peak_tflops=989.0)
    for row in gpu_like["sections"]["speed"]["checks"]["quick-a"]["lengths"].values():
        row["ours"]["mfu"] = 0.25
    text = tables.render(gpu_like)
    assert "NVIDIA H100 80GB HBM3, driver 580.0, 79.2 GiB" in text and "989 TFLOP/s (datasheet)" in text
    assert "| 0.25 |" in text


def test_speed_shapes_are_qwen25s_published_sizes():
    """The parameter counts of Qwen2.5-0.5B and -1.5B (494,032,768 and 1,543,714,304, as published) from
    the shapes, counted by formula and by building the model on the meta device."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shapes = _load("shapes")
    for name, published in (("qwen2.5-0.5b", 494_032_768), ("qwen2.5-1.5b", 1_543_714_304)):
        with torch.device("meta"):
            model = Qwen2ForCausalLM(Qwen2Config(**shapes.SHAPES[name]))
        assert shapes.param_count(shapes.SHAPES[name]) == sum(p.numel() for p in model.parameters()) == published


def test_micro_batches_fit_the_activation_budget():
    speed_common = _load("speed_common")
    shapes = _load("shapes")
    # 0.5B at 256+1024 tokens: 2 bytes x (12 x 896 + 4 x 4864) x 24 layers = 1.44 MB a token, 8 rows = 14.7 GB
    assert speed_common.micro_rows(shapes.SHAPES["qwen2.5-0.5b"], 256, 1024) == 8
    # 1.5B: 3.03 MB a token; 8 rows x 1280 tokens = 31 GB > 16 GiB, 4 rows = 15.5 GB
    assert speed_common.micro_rows(shapes.SHAPES["qwen2.5-1.5b"], 256, 1024) == 4
    assert speed_common.micro_rows(shapes.SHAPES["qwen2.5-1.5b"], 256, 256) == 8


def test_speed_summary_rates_and_mfu():
    """Rates of one measured step, hand-derived: 64 rows x 8 new tokens in 0.5 s of generation = 1024
    tokens/s; 64 x (16 + 8) tokens in 1.0 s of update = 1536 tokens/s; MFU = the step's counted FLOPs
    (benchmarks/grpo_step/flops.py) over 2.0 s over a 1 TFLOP/s peak; TRL's training time is its step less
    its generation."""
    code = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(CHECK)!r})
        sys.path.insert(0, {str(ROOT / "benchmarks" / "grpo_step")!r})
        import sec_speed, shapes
        from flops import step_flops
        shape = shapes.SHAPES["quick-a"]
        entry = {{"length": 8, "setup_s": 1.0, "micro_rows": 8, "peak_allocated_gib": 3.5,
                  "steps": [{{"step_s": 9.0}}, {{"step_s": 2.0, "gen_s": 0.5, "update_actor_s": 1.0}}]}}
        f = step_flops(shapes.flops_shape(shape), shape["vocab_size"], 64, 16, 8, old_log_prob=False)
        print(json.dumps({{"ours": sec_speed.summarize("ours", entry, shape, 16, 64, 1.0, 2.0),
                           "trl": sec_speed.summarize("trl", entry, shape, 16, 64, None, None), "f": f}}))
        """
    )
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    ours, trl, f = out["ours"], out["trl"], out["f"]
    assert ours["gen_tokens_per_s"] == 1024.0 and ours["train_tokens_per_s"] == 1536.0
    assert ours["step_s"] == 2.0 and ours["first_step_s"] == 9.0 and ours["peak_allocated_gib"] == 3.5
    assert ours["mfu"] == round(f["total"] / 2.0 / 1e12, 4)
    assert ours["train_mfu"] == round(3 * f["forward"] / 1.0 / 1e12, 4)
    assert ours["mfu_of_measured_matmul"] == round(f["total"] / 2.0 / 2e12, 4)
    assert trl["train_s"] == 1.5 and "mfu" not in trl
