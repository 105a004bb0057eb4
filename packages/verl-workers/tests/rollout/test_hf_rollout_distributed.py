"""Two gloo ranks sampling from one FSDP2-sharded model stop at different steps without deadlock.

Each forward of a sharded module is a collective, so a rank whose rows all hit EOS must keep
stepping until every rank is done. Rank 0 treats every token as EOS (done after one token); rank 1
has no EOS (runs to response_length). Without the cross-rank check rank 1 would hang. Stepping in
lockstep also gives every rank the same response width R, which DataProto.concat of the ranks'
outputs needs.
"""

import json
import os
import socket
import subprocess
import sys

import pytest

_SCRIPT = r"""
import json, os, sys
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM
from verl.workers.rollout.hf_rollout import SamplingParams, generate_tokens

dist.init_process_group("gloo")
rank = dist.get_rank()
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
for layer in model.model.layers:
    fully_shard(layer)
fully_shard(model)
ids = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]])
mask = (ids != 0).long()
pos = (mask.cumsum(-1) - 1).clamp(min=0)
eos = list(range(model.config.vocab_size)) if rank == 0 else []
out = generate_tokens(model, ids, mask, pos, SamplingParams(response_length=5, do_sample=False), eos, 0)
print("RESULT", json.dumps({"rank": rank, "R": out["responses"].shape[1],
                            "mask": out["response_mask"].tolist(),
                            "pads": out["responses"][:, 1:].eq(0).all().item()}), flush=True)
dist.destroy_process_group()
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two_ranks(tmp_path, script_text: str, model_dir: str) -> dict[int, dict]:
    """Run ``script_text`` as two gloo ranks on 127.0.0.1; return each rank's ``RESULT`` json by rank."""
    script = tmp_path / "two_ranks.py"
    script.write_text(script_text)
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), model_dir],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = {}
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
            line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
            r = json.loads(line[len("RESULT ") :])
            results[r["rank"]] = r
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return results


@pytest.mark.slow
def test_ranks_finishing_at_different_steps_do_not_hang(tmp_path, tiny_model_dir):
    results = _run_two_ranks(tmp_path, _SCRIPT, tiny_model_dir)
    assert results[0]["R"] == 5 and results[0]["mask"] == [[1, 0, 0, 0, 0]] * 2 and results[0]["pads"]
    assert results[1]["R"] == 5 and results[1]["mask"] == [[1] * 5, [1] * 5]


# Inside gathered_fsdp2_params no forward may be a collective, so ranks may run different numbers of
# forwards (agent loops decode each rank's requests independently). The root is sharded with an
# explicit reshard_after_forward=True, as the training engine does; a collective would time out.
_INDEPENDENT_SCRIPT = r"""
import datetime, json, sys
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM
from verl.workers.rollout.hf_rollout import gathered_fsdp2_params

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
for layer in model.model.layers:
    fully_shard(layer, reshard_after_forward=True)
fully_shard(model, reshard_after_forward=True)
ids = torch.tensor([[5, 6, 7, 8]])
with torch.no_grad(), gathered_fsdp2_params(model, reshard_after_forward=True):
    logits = [model(input_ids=ids).logits for _ in range(1 + 3 * rank)]  # rank 0: 1 forward, rank 1: 4
dist.barrier()  # both ranks get here only if no forward above waited for the other rank
with torch.no_grad():
    again = model(input_ids=ids).logits  # resharded afterwards: a normal (collective) forward works
print("RESULT", json.dumps({"rank": rank, "same": bool(torch.allclose(logits[-1], again, atol=1e-5))}), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_gathered_params_let_ranks_run_different_forward_counts(tmp_path, tiny_model_dir):
    results = _run_two_ranks(tmp_path, _INDEPENDENT_SCRIPT, tiny_model_dir)
    assert results[0]["same"] and results[1]["same"]
