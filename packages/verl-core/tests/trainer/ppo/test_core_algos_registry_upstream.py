"""The registries' public functions behave as upstream documents them (core_algos' docstrings, upstream's
``register_adv_est`` / ``get_adv_estimator_fn`` / ``register_policy_loss`` / ``get_policy_loss_fn``):
registering the same function twice is fine, another function under a taken name is a ValueError, an
unknown name is a ValueError in upstream's words, and a plain dict swapped in for the registry is used."""

from enum import Enum

import pytest
import verl.trainer.ppo.core_algos as core_algos
from verl.trainer.ppo.core_algos import (
    get_adv_estimator_fn,
    get_policy_loss_fn,
    register_adv_est,
    register_policy_loss,
)


def twice():
    return "twice"


@pytest.fixture
def swapped(monkeypatch):
    """The module's registries replaced by plain dicts, as code written for upstream does."""
    adv = {"gae": lambda x: x * 2}
    loss = {"vanilla": lambda x: x + 1}
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", adv)
    monkeypatch.setattr(core_algos, "POLICY_LOSS_REGISTRY", loss)
    return adv, loss


def test_a_swapped_in_dict_is_the_registry(swapped):
    adv, loss = swapped
    assert get_adv_estimator_fn("gae")(5) == 10 and get_policy_loss_fn("vanilla")(5) == 6

    @register_adv_est("mine")
    def mine():
        return "mine"

    assert adv["mine"] is mine and mine() == "mine"  # the decorator returns the function
    register_policy_loss("my_loss")(twice)
    assert loss["my_loss"] is twice


def test_the_same_function_twice_is_fine_another_is_an_error(swapped):
    adv, _ = swapped
    register_adv_est("dup")(twice)
    register_adv_est("dup")(twice)
    assert adv["dup"] is twice
    with pytest.raises(ValueError, match="Adv estimator dup has already been registered"):
        register_adv_est("dup")(lambda: None)
    register_policy_loss("dup_loss")(twice)
    register_policy_loss("dup_loss")(twice)
    with pytest.raises(ValueError, match="Policy loss dup_loss has already been registered"):
        register_policy_loss("dup_loss")(lambda: None)


def test_an_enum_registers_under_its_value(swapped):
    class Est(Enum):
        TEST = "enum_estimator"

    register_adv_est(Est.TEST)(twice)
    assert swapped[0]["enum_estimator"] is twice and get_adv_estimator_fn(Est.TEST) is twice


def test_unknown_names_in_upstreams_words():
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: invalid_name") as e:
        get_adv_estimator_fn("invalid_name")
    assert isinstance(e.value, KeyError) and "grpo" in str(e.value)  # and the known ones
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: GAE"):
        get_adv_estimator_fn("GAE")  # case-sensitive
    with pytest.raises(ValueError, match=r"Unsupported loss mode: vanila. Supported modes are: \[.*'vanilla'") as e:
        get_policy_loss_fn("vanila")
    assert "Did you mean 'vanilla'?" in str(e.value)


def test_the_real_registries_still_refuse_a_second_function():
    with pytest.raises(ValueError, match="Adv estimator grpo has already been registered"):
        register_adv_est("grpo")(lambda **kw: None)
    assert get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage
