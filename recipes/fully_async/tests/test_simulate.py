"""The idle-time accounting model against hand-computed schedules."""

import pytest
from verl_recipe_fully_async.simulate import predict, table


def test_training_bound_split_by_hand():
    # colocated: 100 gen (30 of it decoding) + 20 old log-probs + 60 update = 180 s
    sync, osp, fa = predict(gen=100, train=60, busy=0.3, old_log_prob=20)
    assert sync.step_s == 180 and sync.rollout_idle == pytest.approx(70 / 180)
    # half the workers each: decoding work 30 / 0.5 = 60 s (latency 100 s), update 60 / 0.5 = 120 s
    assert osp.step_s == 120 and osp.speedup == pytest.approx(1.5)
    assert osp.rollout_idle == pytest.approx(0.5) and osp.trainer_idle == 0
    assert fa.step_s == 120


def test_generation_bound_long_tail_by_hand():
    # 200 s of generation, a quarter of it decoding: the long tail dominates the colocated step
    sync, osp, fa = predict(gen=200, train=40, busy=0.25, sync=4, trigger=2)
    assert sync.step_s == 240
    assert osp.step_s == 204 and osp.trainer_idle == pytest.approx(
        1 - 80 / 204
    )  # waits for the longest response
    assert fa.step_s == 102 and fa.speedup == pytest.approx(240 / 102)  # 100 s of work, sync every 2 steps


def test_training_that_does_not_scale_and_a_cpu_like_engine():
    _, _, fa = predict(gen=178, train=114, busy=0.3, old_log_prob=54, train_scaling=0)
    assert fa.step_s == pytest.approx(114) and fa.speedup == pytest.approx(346 / 114)
    # compute-bound decoding (busy = 1) on half the cores and compute-bound training: nothing to gain
    sync, osp, fa = predict(gen=10, train=10, busy=1.0)
    assert osp.speedup == pytest.approx(1.0) and fa.speedup == pytest.approx(1.0)
    assert "| fully async | 20.0 | 1.00x |" in table([fa])


def test_bad_inputs_are_errors():
    with pytest.raises(ValueError, match="busy"):
        predict(gen=1, train=1, busy=0)
    with pytest.raises(ValueError, match="rollout_share"):
        predict(gen=1, train=1, busy=1, rollout_share=1)
