"""Multi-node: a real two-node Ray cluster on this machine (``ray start --head`` plus a second
``ray start --address``, each node with 1 CPU and a custom resource of its own), GRPO with
``trainer.nnodes=2 trainer.n_gpus_per_node=1`` placed across both nodes, 2 steps, then teardown.

Each ``ray start`` runs with ``--block`` as our child process: terminating it stops exactly the Ray
processes it started (``ray stop`` would stop every Ray instance on the machine, other tests' too). A
private ``--temp-dir`` keeps the cluster's address out of ``/tmp/ray``, so no other ``ray.init()`` on
this machine connects to it by accident.
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# node start-up retries on a loaded machine can take minutes on their own
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

DRIVER = Path(__file__).with_name("multinode_driver.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_ports() -> list[str]:
    """Free ports for every listener of one node: two nodes on one machine (and other tests' Ray
    instances) would otherwise collide on the fixed defaults (the dashboard agent's 52365, ...)."""
    keys = (
        "node-manager-port",
        "object-manager-port",
        "runtime-env-agent-port",
        "dashboard-agent-grpc-port",
        "dashboard-agent-listen-port",
        "metrics-export-port",
    )
    args = [f"--{k}={_free_port()}" for k in keys]
    workers = ",".join(str(_free_port()) for _ in range(8))  # worker processes' gRPC ports
    return [*args, f"--worker-port-list={workers}"]


def _renice(pgid: int, value: int) -> None:
    try:  # raising priority needs root; without it the node just starts at normal priority
        os.setpriority(os.PRIO_PGRP, pgid, value)
    except PermissionError:
        pass


def _start_node(cmd: list[str], env: dict, log_path: Path, attempts: int = 3) -> subprocess.Popen:
    """``ray start --block`` until it reports "Ray runtime started". On a busy machine a node's raylet can
    give up waiting (~15 s, fixed in this Ray) for its Python agents to report their ports; a retry, with
    their modules now in the page cache, usually makes it."""
    for attempt in range(1, attempts + 1):
        log_file = log_path.with_suffix(f".{attempt}.log")
        with open(log_file, "w") as log:
            proc = subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            # Start-up only: a small priority boost so the node's agents report in time on a loaded
            # machine; the node's process group goes back to normal priority once it is up.
            _renice(proc.pid, -15)
            deadline = time.monotonic() + 100
            while time.monotonic() < deadline and proc.poll() is None:
                if "Ray runtime started" in log_file.read_text():
                    _renice(proc.pid, 0)
                    return proc
                time.sleep(0.5)
        except BaseException:
            _stop(proc)
            raise
        _stop(proc)
    raise RuntimeError(f"{cmd[:3]} did not start in {attempts} attempts; see {log_path.parent}/*.log")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the group of the ray start we spawned (start_new_session)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_grpo_on_two_ray_nodes(tmp_path):
    from verl.workers.tiny import build_tiny_qwen2

    tiny_model_dir = str(tmp_path / "model")
    build_tiny_qwen2(tiny_model_dir, size="xs", seed=0)
    ray_bin = str(Path(sys.executable).with_name("ray"))
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="vmn_", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    # Ray 2.5x+ clusters from `ray start` authenticate by token: every node and the driver get the same
    # one (made here for this test cluster only)
    env = {
        **os.environ,
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        # a busy 2-core machine starts a node's Python agents slowly; the defaults give up after ~15 s
        "RAY_raylet_start_wait_time_s": "180",
        "RAY_agent_register_timeout_ms": "180000",
    }
    env.pop("RAY_ADDRESS", None)
    common = ["--block", "--num-cpus=1", "--num-gpus=0", "--disable-usage-stats"]
    head_cmd = [
        ray_bin,
        "start",
        "--head",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--include-dashboard=false",
        f"--temp-dir={temp_dir}",
        f"--ray-client-server-port={_free_port()}",
        '--resources={"verl_test_head": 1}',
        *_node_ports(),
        *common,
    ]
    worker_cmd = [
        ray_bin,
        "start",
        f"--address=127.0.0.1:{port}",
        "--node-ip-address=127.0.0.1",
        '--resources={"verl_test_worker": 1}',
        *_node_ports(),
        *common,
    ]
    procs = []
    try:
        procs.append(_start_node(head_cmd, env, tmp_path / "head.log"))
        procs.append(_start_node(worker_cmd, env, tmp_path / "worker.log"))
        run = subprocess.run(
            [
                sys.executable,
                str(DRIVER),
                "--model",
                tiny_model_dir,
                "--workdir",
                str(tmp_path),
                "--nnodes",
                "2",
            ],
            env={**env, "RAY_ADDRESS": f"127.0.0.1:{port}"},
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        for p in reversed(procs):
            _stop(p)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert run.returncode == 0, f"driver failed:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    nodes = result["worker_nodes"]
    assert len(nodes) == 2 and nodes[0] != nodes[1], f"both workers ran on one node: {nodes}"
    # one worker on the head (verl_test_head), one on the second node (verl_test_worker)
    assert sorted(result["node_resources"][n][0] for n in nodes) == ["verl_test_head", "verl_test_worker"]
    assert result["metrics"]["training/global_step"] == 2
    assert all(v == v for v in result["metrics"].values())  # finite-ish: no NaN
