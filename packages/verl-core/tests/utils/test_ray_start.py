"""init_ray starts Ray again only when Ray's fixed start-up window was missed."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from verl.utils.ray_start import init_ray  # noqa: E402

# Ray's own message (ray/_private/node.py) when the raylet does not register within 30 s.
RAY_MESSAGE = (
    "The current node timed out during startup. This could happen because some of the raylet failed "
    "to startup or the GCS has become overloaded."
)


@pytest.fixture
def fake_ray(monkeypatch):
    calls = {"init": [], "shutdown": 0, "fail": []}

    def init(**kwargs):
        calls["init"].append(kwargs)
        if calls["fail"]:
            raise calls["fail"].pop(0)
        return "context"

    def shutdown():
        calls["shutdown"] += 1

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", shutdown)
    return calls


def test_a_missed_startup_window_is_retried(fake_ray, capsys):
    fake_ray["fail"] = [Exception(RAY_MESSAGE), Exception(RAY_MESSAGE)]
    assert init_ray(attempts=3, num_cpus=2) == "context"
    assert fake_ray["init"] == [{"num_cpus": 2}] * 3 and fake_ray["shutdown"] == 2
    assert "starting it again (3/3)" in capsys.readouterr().err


def test_the_last_attempt_raises_rays_error(fake_ray):
    fake_ray["fail"] = [Exception(RAY_MESSAGE)] * 2
    with pytest.raises(Exception, match="timed out during startup"):
        init_ray(attempts=2)
    assert len(fake_ray["init"]) == 2


def test_any_other_failure_is_not_retried(fake_ray):
    fake_ray["fail"] = [ValueError("runtime_env: bad pip spec")]
    with pytest.raises(ValueError, match="bad pip spec"):
        init_ray(attempts=5)
    assert len(fake_ray["init"]) == 1 and fake_ray["shutdown"] == 0


def test_attempts_must_be_positive(fake_ray):
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        init_ray(attempts=0)
