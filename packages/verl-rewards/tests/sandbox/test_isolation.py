import logging

import pytest
from verl.rewards.sandbox import SANDBOXES, get_sandbox
from verl.rewards.sandbox.isolation import probe


def test_weak_level_is_announced_loudly(caplog):
    with caplog.at_level(logging.WARNING, logger="verl.rewards.sandbox.isolation"):
        iso = probe("rlimits")
    assert iso.level == "rlimits"
    assert "WEAK" in caplog.text and "NETWORK" in caplog.text and "bubblewrap" in caplog.text


def test_rlimits_level_still_limits_time_and_memory():
    sb = get_sandbox("local", isolation="rlimits", timeout=1)
    assert sb.run("while True: pass").status == "timeout"
    assert sb.run("x = bytearray(4 * 1024**3)").status == "memory_limit"


def test_unknown_level_and_sandbox_names_are_errors():
    with pytest.raises(ValueError, match="'auto' or one of"):
        probe("docker")
    with pytest.raises(KeyError, match="sandbox_fusion"):
        SANDBOXES.get("sandbox-fusion")


def test_auto_never_falls_back_to_rlimits(monkeypatch):
    """Without bubblewrap and user namespaces, code rewards are refused unless rlimits is asked for by name."""
    import shutil

    from verl.rewards.sandbox import isolation

    assert probe("auto").level in ("bwrap", "namespaces")
    real_which = shutil.which
    monkeypatch.setattr(
        isolation.shutil, "which", lambda name, **kw: None if name in ("bwrap", "unshare") else real_which(name, **kw)
    )
    with pytest.raises(RuntimeError, match=r"reward.sandbox.isolation=rlimits by name") as err:
        probe("auto")
    assert "bwrap: not installed" in str(err.value) and "namespaces: no unshare tool" in str(err.value)
    assert probe("rlimits").level == "rlimits"
