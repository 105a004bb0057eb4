import pytest
from verl.utils.registry import Registry, UnknownNameError


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


def test_registry_is_a_mutable_mapping_that_keeps_the_house_rules():
    reg = Registry("widget")
    reg["a"] = len  # __setitem__ registers
    reg.register("b", abs)
    assert reg["a"] is len and len(reg) == 2 and list(reg) == ["a", "b"]
    assert dict(reg) == {"a": len, "b": abs} and reg.copy() == {"a": len, "b": abs}
    assert set(reg.keys()) == {"a", "b"} and set(reg.values()) == {len, abs}
    with pytest.raises(ValueError, match="already registered"):
        reg["a"] = abs  # a taken name stays an error, whichever door
    with pytest.raises(ValueError, match="already registered"):
        reg.update({"b": len})
    assert reg.get("zz", 7) == 7 and reg.get("a", 7) is len
    # an unknown name is a KeyError (mapping) and a ValueError (upstream's getters), with the listing
    for lookup in (lambda: reg["zz"], lambda: reg.get("zz")):
        with pytest.raises(KeyError) as e:
            lookup()
        assert isinstance(e.value, ValueError) and isinstance(e.value, UnknownNameError)
        assert str(e.value) == "unknown widget 'zz'; known: a, b"
    del reg["a"]
    with pytest.raises(KeyError, match="unknown widget 'a'"):
        del reg["a"]
    reg.unregister("a")  # lenient: no error
    assert reg.pop("b") is abs and len(reg) == 0
    reg.register("c", len)
    reg.clear()
    assert len(reg) == 0 and "c" not in reg
