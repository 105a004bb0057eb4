"""The queue, the staleness bound's arithmetic and the sync handshake (plain threads, no Ray)."""

import threading
import time

import pytest
from verl_recipe_fully_async.message_queue import (
    Coordinator,
    MessageQueue,
    Sample,
    Stopped,
    SyncRequest,
    sample_limit,
)


def sample(version, index=0, rows=4, end=None):
    return Sample(
        data=list(range(rows)), version=version, end_version=version if end is None else end, index=index
    )


def test_sample_limit_by_hand():
    # W = 32 samples per version, s = 0.5: 16 may run ahead; version 0 -> 48, version 2 -> 3 * 32 + 16 = 112
    assert sample_limit(0, 32, 0.5) == 48
    assert sample_limit(2, 32, 0.5) == 112
    assert sample_limit(0, 32, 0.1) == 35  # floor(3.2)
    assert sample_limit(3, 16, 0.0) == 64  # on-policy: exactly one window per version
    assert sample_limit(1, 16, 1.0) == 48  # one-step-off: a whole window ahead


def test_queue_back_pressure_blocks_put_until_a_get():
    cond = threading.Condition()
    q = MessageQueue(2, cond)
    with cond:
        assert q.put(sample(0, 0)) and q.put(sample(0, 1))
    done = threading.Event()

    def producer():
        with cond:
            q.put(sample(0, 2))
        done.set()

    t = threading.Thread(target=producer)
    t.start()
    assert not done.wait(0.3)  # full: the producer waits
    with cond:
        got = q.get(consumer_version=1)
    assert done.wait(5) and got.index == 0
    t.join()
    with cond:
        assert [s.index for s in q.contents()] == [1, 2]
        assert q.stale_got == 1 and q.stale_trajectories_got == 4  # a version-0 sample read at version 1


def test_interrupted_put_returns_false_without_queuing():
    cond = threading.Condition()
    q = MessageQueue(1, cond)
    with cond:
        q.put(sample(0))
        assert q.put(sample(0, 1), interrupt=lambda: True) is False
        assert len(q) == 1 and q.total_put == 1


def test_admission_follows_the_bound_and_stops_at_the_budget():
    c = Coordinator(samples_per_version=8, staleness_threshold=0.5, total_samples=30)
    assert c.admit(100) == 12  # (0 + 1) * 8 + floor(4) = 12
    assert c.admit(1) == 0
    for i in range(8):
        c.put(sample(0, i))
    assert [s.index for s in c.get(8)] == list(range(8))
    request = SyncRequest(version=1)
    c.post_sync(request)
    assert c.admit(5) == 0  # nothing new while a sync is pending
    assert c.take_sync() is request
    c.finish_sync(request)
    assert request.done.is_set() and c.rollout_version == 1
    assert c.admit(100) == 8  # limit 2 * 8 + 4 = 20, 12 started
    c.rollout_version = 5
    assert c.admit(100) == 10  # the budget of 30, not the bound, now decides


def test_versions_are_loaded_in_order_a_newer_request_waits_for_the_older():
    c = Coordinator(4, 1.0, 100)
    first, second = SyncRequest(1, payload="w1"), SyncRequest(2, payload="w2")
    c.post_sync(first)
    posted = threading.Event()
    t = threading.Thread(target=lambda: (c.post_sync(second), posted.set()))
    t.start()
    assert not posted.wait(0.2)  # the trainer waits: version 1 has not been loaded yet
    assert c.take_sync() is first
    c.finish_sync(first)
    assert posted.wait(5) and c.take_sync() is second and c.trainer_version == 2
    t.join()


def test_snapshot_state_reaches_the_waiting_trainer():
    c = Coordinator(4, 0.0, 100)
    request = SyncRequest(1, snapshot=True)
    c.post_sync(request)

    def rollouter():
        r = c.take_sync()
        time.sleep(0.05)
        c.finish_sync(r, snapshot=lambda: {"queued": 3, "version": c.rollout_version})

    threading.Thread(target=rollouter).start()
    assert c.wait_synced(request) == {"queued": 3, "version": 1}  # taken at the new version


def test_a_failure_on_one_side_stops_the_other():
    c = Coordinator(4, 0.0, 100)
    boom = ValueError("rollout worker died")
    threading.Timer(0.1, c.stop, args=(boom,)).start()
    with pytest.raises(Stopped, match="ValueError: rollout worker died") as e:
        c.get(4)  # would wait forever for samples
    assert e.value.__cause__ is boom


def test_state_round_trip_keeps_queue_counters_and_recounts_started():
    c = Coordinator(8, 0.5, 100)
    c.admit(12)
    for i in range(10):
        c.put(sample(0, i))
    c.get(4)
    c.trainer_version = c.rollout_version = 1
    state = c.state_dict()
    d = Coordinator(8, 0.5, 100)
    d.load_state_dict(state)
    assert [s.index for s in d.queue.contents()] == [4, 5, 6, 7, 8, 9]
    # 2 admitted samples were still being generated: they are not in the queue, so they start again
    assert d.consumed == 4 and d.started == 10 and d.rollout_version == d.trainer_version == 1
    assert d.queue.total_put == 10 and d.queue.total_got == 4


def test_bad_settings_are_errors():
    with pytest.raises(ValueError, match="staleness_threshold"):
        Coordinator(8, 1.5, 100)
    with pytest.raises(ValueError, match="samples_per_version"):
        Coordinator(0, 0.1, 100)
