"""The staleness bound is never exceeded: the real `Rollouter` loop against a simulated rollout pool
(``simulated.py``) and a trainer thread, at several speeds and settings. Every sample's policy version is
counted per sync window."""

import math

import pytest
from verl_recipe_fully_async.message_queue import Coordinator
from verl_recipe_fully_async.rollouter import Rollouter

from .simulated import FakeTrainer, SimulatedPool, check_staleness, config, train_against


def run(s, trigger, tbs, wave, partial, steps, rollout_delay, train_delay, seed):
    cfg = config(s, trigger, tbs, wave, partial)
    W = trigger * tbs
    coord = Coordinator(W, s, total_samples=steps * tbs)
    pool = SimulatedPool(seed, rollout_delay)
    rollouter = Rollouter(FakeTrainer(cfg), coord, pool)
    return train_against(rollouter, coord, tbs, trigger, steps, train_delay, seed), W, pool


@pytest.mark.parametrize(
    "s,trigger,tbs,wave,partial,rollout_delay,train_delay",
    [
        (0.5, 2, 4, 2, True, 0.0, 0.01),  # fast rollouter: runs ahead to the bound
        (0.5, 2, 4, 2, True, 0.01, 0.0),  # slow rollouter: the trainer waits, syncs pause waves
        (0.25, 1, 8, 4, False, 0.002, 0.004),
        (0.0, 2, 4, 4, True, 0.0, 0.005),  # on-policy
        (1.0, 1, 4, 4, False, 0.0, 0.01),  # one-step-off
    ],
)
def test_stale_samples_per_window_never_exceed_the_bound(
    s, trigger, tbs, wave, partial, rollout_delay, train_delay
):
    steps = 12
    consumed, W, _ = run(s, trigger, tbs, wave, partial, steps, rollout_delay, train_delay, seed=7)
    check_staleness(consumed, steps, tbs, s, W)
    for version, smp in consumed:
        assert 0 <= version - smp.version <= 1  # never more than one sync old
        assert smp.end_version - smp.version <= 1
        if not partial:
            assert smp.end_version == smp.version


def test_a_fast_rollouter_reaches_the_bound_and_partial_rollouts_happen():
    """The cases above can fail: here the bound is reached (the rollouter really runs ahead) and, with a
    slow pool, waves really span syncs."""
    consumed, W, _ = run(0.5, 2, 4, 2, True, 12, rollout_delay=0.0, train_delay=0.02, seed=3)
    stale = [sum(v > smp.version for v2, smp in consumed if v2 == v) for v in {v for v, _ in consumed}]
    assert max(stale) == math.floor(0.5 * W)
    consumed, _, pool = run(0.5, 1, 4, 4, True, 12, rollout_delay=0.02, train_delay=0.0, seed=5)
    assert any(smp.partial for _, smp in consumed) and pool.loaded


def test_one_step_off_is_exactly_one_step_stale():
    """trigger 1, s = 1, whole-batch waves, no pauses: batch k is trained at version k and was generated at
    version k - 1 (the first at 0), whatever the speeds."""
    for rollout_delay, train_delay in ((0.0, 0.01), (0.005, 0.0)):
        consumed, _, _ = run(1.0, 1, 4, 4, False, 8, rollout_delay, train_delay, seed=11)
        by_step = [consumed[i : i + 4] for i in range(0, len(consumed), 4)]
        for k, batch in enumerate(by_step):
            assert {v for v, _ in batch} == {k}
            assert {smp.version for _, smp in batch} == {max(k - 1, 0)}, (
                k,
                [smp.version for _, smp in batch],
            )
