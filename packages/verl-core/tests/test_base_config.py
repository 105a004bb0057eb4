"""verl.base_config.BaseConfig behaves as upstream's (checked against upstream 0.9.1 by hand): a
dataclass that reads like a dict, whose fields are set once unless listed in _mutable_fields."""

import dataclasses
from dataclasses import FrozenInstanceError, dataclass, field

import pytest
from verl.base_config import BaseConfig


@dataclass
class Optim(BaseConfig):
    _mutable_fields = {"lr"}
    lr: float = 1e-6
    betas: tuple = (0.9, 0.999)
    extra: dict = field(default_factory=dict)


def test_reads_like_a_dict_with_target_among_the_fields():
    c = Optim(lr=0.1)
    assert list(c) == ["_target_", "lr", "betas", "extra"] and len(c) == 4
    assert c["lr"] == c.lr == 0.1 and c.get("betas") == (0.9, 0.999) and c.get("nope", 5) == 5
    assert dict(c) == {"_target_": "", "lr": 0.1, "betas": (0.9, 0.999), "extra": {}}
    assert dict(c.items()) == dict(c) and list(c.keys()) == list(c)
    assert "lr" in c and "nope" not in c  # upstream raises AttributeError here; we answer False
    with pytest.raises(AttributeError, match="no key 'nope'"):
        c["nope"]
    with pytest.raises(KeyError):
        c["nope"]


def test_fields_are_set_once_unless_mutable():
    c = Optim()
    c.lr = 0.5  # listed in _mutable_fields
    assert c.lr == 0.5
    with pytest.raises(FrozenInstanceError, match="Field 'betas' is frozen and cannot be modified"):
        c.betas = (0.0, 0.0)
    c.note = "new attributes may be added once"  # as upstream: only existing fields are frozen
    with pytest.raises(FrozenInstanceError):
        c.note = "but not changed"
    d = dataclasses.replace(c, betas=(0.5, 0.5))
    assert d.betas == (0.5, 0.5) and c.betas == (0.9, 0.999)
    assert Optim(lr=0.5) == Optim(lr=0.5) != Optim(lr=0.4)
    with pytest.raises(TypeError):
        hash(c)  # a mutable-field dataclass with eq is unhashable, as upstream's
