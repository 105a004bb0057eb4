"""``BaseConfig``: upstream verl's base for typed config dataclasses (``verl.base_config``).

A subclass is a ``@dataclass`` that reads like a read-only dict as well as an object:
``cfg.lr``, ``cfg["lr"]``, ``cfg.get("lr", 1e-6)``, ``"lr" in cfg``, ``len(cfg)``, ``dict(cfg)``
and iteration over the field names (``_target_`` included, as upstream). A field that has been
set cannot be set again (``dataclasses.FrozenInstanceError``) unless it is listed in the class's
``_mutable_fields``; derive a changed copy with ``dataclasses.replace``.

One difference from upstream: ``cfg["missing"]`` raises an error that is both an ``AttributeError``
(upstream's) and a ``KeyError``, so ``"missing" in cfg`` is False instead of raising.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import FrozenInstanceError, dataclass, fields
from typing import Any, ClassVar

__all__ = ["BaseConfig"]


class MissingConfigKeyError(AttributeError, KeyError):
    """A key that is not an attribute of the config (an AttributeError as upstream, a KeyError for
    the mapping protocol)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass
class BaseConfig(Mapping):
    """Dict-like, set-once dataclass config (see the module doc)."""

    _mutable_fields: ClassVar[set[str]] = set()
    _target_: str = ""

    def __setattr__(self, name: str, value: Any) -> None:
        # the dataclass __init__ sets each field once; after that only _mutable_fields may change
        if name in self.__dict__ and name not in self._mutable_fields:
            raise FrozenInstanceError(f"Field '{name}' is frozen and cannot be modified")
        super().__setattr__(name, value)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return getattr(self, key)
        except AttributeError:
            return default

    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self, key)
        except AttributeError as e:
            raise MissingConfigKeyError(f"{type(self).__name__} has no key {key!r}") from e

    def __iter__(self) -> Iterator[str]:
        return (f.name for f in fields(self))

    def __len__(self) -> int:
        return len(fields(self))
