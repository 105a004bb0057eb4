import pytest
from verl.utils.registry import Registry


def test_register_and_get_by_decorator_and_call():
    reg = Registry("widget")

    @reg.register("a")
    def a():
        return 1

    reg.register("b", len)
    assert reg.get("a") is a
    assert reg.get("b") is len
    assert "a" in reg and "zzz" not in reg
    assert reg.names() == ["a", "b"]


def test_duplicate_name_is_an_error_naming_the_holder():
    reg = Registry("widget")
    reg.register("x", len)
    reg.register("x", len)  # the same object again is harmless (module re-import)
    with pytest.raises(ValueError, match=r"widget 'x' is already registered \(by builtins.len\)"):
        reg.register("x", abs)


def test_unknown_name_lists_known_and_suggests():
    reg = Registry("advantage estimator")
    reg.register("grpo", len)
    reg.register("gae", abs)
    with pytest.raises(KeyError) as e:
        reg.get("grp")
    msg = str(e.value)
    assert "unknown advantage estimator 'grp'" in msg
    assert "known: gae, grpo" in msg
    assert "Did you mean 'grpo'" in msg


def test_unknown_name_with_provider_hint_names_the_package():
    reg = Registry("rollout engine", {"vllm": "verl-workers[vllm]"})
    with pytest.raises(KeyError, match=r"pip install verl-workers\[vllm\]"):
        reg.get("vllm")
