"""The verl.plugins entry point: a fresh process finds verl-workers' objects by name only."""

import json
import subprocess
import sys
import warnings

import pytest
from verl.workers.tokenizer import hf_tokenizer

_PROBE = """
import json, sys
from verl.registries import ROLLOUT_ENGINES, TRAINING_ENGINES, WORKER_CLASSES
from verl.trainer.model_builders import TOKENIZER_LOADERS
out = {
    "tokenizer_loader": TOKENIZER_LOADERS.get("hf").__module__,
    "sft": WORKER_CLASSES.get("sft").__name__,
    "actor": WORKER_CLASSES.get("actor_rollout_ref").__module__ + "." + WORKER_CLASSES.get("actor_rollout_ref").__name__,
    "critic": WORKER_CLASSES.get("critic").__name__,
    "rollouts": ROLLOUT_ENGINES.names(),
    "engines": TRAINING_ENGINES.names(),
}
out["vllm"] = ROLLOUT_ENGINES.get("vllm").__module__
out["engine_libraries_imported"] = sorted({"vllm", "sglang"} & set(sys.modules))
print(json.dumps(out))
"""


def test_registries_fill_from_the_entry_point_in_a_fresh_process():
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["actor"] == "verl.workers.fsdp_workers.ActorRolloutRefWorker"
    assert out["critic"] == "CriticWorker"
    assert out["sft"] == "SFTWorker" and out["tokenizer_loader"] == "verl.workers.tokenizer"
    assert {"hf", "native", "vllm", "sglang"} <= set(out["rollouts"])
    assert {"fsdp2", "fsdp"} <= set(out["engines"])
    # vllm/sglang register without importing their libraries (building one without it names the extra)
    assert out["vllm"] == "verl.workers.rollout.vllm_rollout.vllm_rollout"
    assert out["engine_libraries_imported"] == []


def test_hf_tokenizer_pads_with_eos_when_needed(tmp_path, tiny_model_dir):
    tok = hf_tokenizer(tiny_model_dir)
    assert tok.pad_token_id == 0 and tok.eos_token_id == 1
    tok.pad_token = None
    tok.save_pretrained(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        no_pad = hf_tokenizer(tmp_path)
    assert no_pad.pad_token_id == no_pad.eos_token_id == 1
    assert any("no pad token" in str(w.message) for w in caught)
    with pytest.raises(OSError):
        hf_tokenizer(tmp_path / "missing")
