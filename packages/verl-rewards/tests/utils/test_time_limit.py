from concurrent.futures import ThreadPoolExecutor

import pytest
from verl.rewards.utils.time_limit import TimeLimiter


def _spin(n):
    while True:
        n += 1


def _bigpow(x):
    return 9**9**x  # one C call: a signal handler could never interrupt it


def _boom(x):
    raise ValueError(f"bad value {x}")


@pytest.fixture(scope="module")
def limiter():
    lim = TimeLimiter(max_workers=2)
    yield lim
    lim.close()


def test_result_and_exception_cross_the_process(limiter):
    assert limiter.call(divmod, 17, 5, timeout=30) == (3, 2)
    with pytest.raises(ValueError, match="bad value 7"):
        limiter.call(_boom, 7, timeout=30)


def test_uninterruptible_c_call_is_stopped_from_a_worker_thread(limiter):
    restarts = limiter.restarts
    # Off the main thread, where signal.alarm cannot be used at all.
    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(limiter.call, _bigpow, 9, timeout=1)
        with pytest.raises(TimeoutError, match="did not finish within 1 s"):
            fut.result()
    assert limiter.restarts == restarts + 1
    # The pool recovered: the next call works.
    assert limiter.call(abs, -4, timeout=60) == 4


def test_many_threads_share_the_pool_and_helpers_outlive_the_threads(limiter):
    restarts = limiter.restarts
    for _ in range(2):  # the pool threads of the first round are gone before the second
        with ThreadPoolExecutor(6) as ex:
            out = list(ex.map(lambda v: limiter.call(abs, v, timeout=60), range(-12, 0)))
        assert out == list(range(12, 0, -1))
    assert limiter.restarts == restarts
