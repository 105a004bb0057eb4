"""One registry per extension point (DESIGN rule 4).

A `Registry` maps a name chosen in config to an object registered by a decorator. Registering a taken
name is an error; looking up an unknown name is an error that lists the known ones (and, when the
object usually comes from another distribution, which package to install). A `Registry` is also a
mutable mapping, so code written for upstream verl's plain-dict registries keeps working. Third-party code
registers through the ``verl.plugins`` entry-point group: each entry point names a module whose import
performs its registrations; plugins load once, lazily, on the first lookup miss or listing.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, MutableMapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")

PLUGIN_GROUP = "verl.plugins"
_plugins_loaded = False


def load_plugins() -> None:
    """Import every module advertised in the ``verl.plugins`` entry-point group (once per process)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=PLUGIN_GROUP):
        try:
            ep.load()
        except ImportError as e:
            # A half-installed optional package must not break unrelated lookups; say what happened.
            import warnings

            warnings.warn(f"verl plugin {ep.name!r} ({ep.value}) failed to import: {e}", stacklevel=2)


class UnknownNameError(KeyError, ValueError):
    """A lookup of a name nobody registered.

    Both a ``KeyError`` (what a mapping raises) and a ``ValueError`` (what upstream verl's
    ``get_adv_estimator_fn`` / ``get_policy_loss_fn`` raise), so callers written for either catch it.
    """

    def __str__(self) -> str:
        # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


_MISSING: Any = object()


class Registry(MutableMapping, Generic[T]):
    """Name -> object, filled by ``@registry.register("name")``.

    It is a mapping, so code written for upstream verl's plain-dict registries
    (``ADV_ESTIMATOR_REGISTRY[name]``, ``name in reg``, ``len``, iteration, ``items()``, ``clear()``,
    ``dict(reg)``) works unchanged. The house rules still hold through every door: assigning a taken
    name (``reg[name] = other`` or ``register``) is an error, and an unknown name raises
    `UnknownNameError` listing the known ones. ``get(name)`` without a default raises too (our
    callers rely on it); ``get(name, default)`` returns the default, as ``dict.get`` does.

    ``provider_hint`` maps a name to the distribution that normally provides it, so a lookup for
    e.g. ``fsdp2`` without verl-workers installed says ``pip install verl-workers``.
    """

    def __init__(self, kind: str, provider_hint: dict[str, str] | None = None):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._provider_hint = dict(provider_hint or {})

    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        """Use as ``@reg.register("name")`` or call ``reg.register("name", obj)``."""

        def add(o: T) -> T:
            if name in self._items and self._items[name] is not o:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered (by {_describe(self._items[name])}); "
                    f"pick another name or unregister the old one first"
                )
            self._items[name] = o
            return o

        return add if obj is None else add(obj)

    def unregister(self, name: str) -> None:
        """Forget ``name`` if registered (no error when it is not; ``del reg[name]`` insists)."""
        self._items.pop(name, None)

    def get(self, name: str, default: Any = _MISSING) -> T:
        try:
            return self[name]
        except UnknownNameError:
            if default is _MISSING:
                raise
            return default

    def _unknown_message(self, name: str) -> str:
        known = sorted(self._items)
        msg = f"unknown {self.kind} {name!r}; known: {', '.join(known) or '(none registered)'}"
        close = difflib.get_close_matches(str(name), known, n=1)
        if close:
            msg += f". Did you mean {close[0]!r}?"
        if name in self._provider_hint:
            msg += f". {name!r} is provided by {self._provider_hint[name]}: pip install {self._provider_hint[name]}"
        return msg

    def names(self) -> list[str]:
        load_plugins()
        return sorted(self._items)

    def copy(self) -> dict[str, T]:
        """A plain-dict snapshot (as ``dict.copy`` of upstream's registries)."""
        load_plugins()
        return dict(self._items)

    # --- the mapping protocol ------------------------------------------------------------------

    def __getitem__(self, name: str) -> T:
        if name not in self._items:
            load_plugins()
        if name not in self._items:
            raise UnknownNameError(self._unknown_message(name))
        return self._items[name]

    def __setitem__(self, name: str, obj: T) -> None:
        self.register(name, obj)

    def __delitem__(self, name: str) -> None:
        if name not in self._items:
            raise UnknownNameError(self._unknown_message(name))
        del self._items[name]

    def __contains__(self, name: object) -> bool:
        if name in self._items:
            return True
        load_plugins()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        load_plugins()
        return len(self._items)

    def clear(self) -> None:
        # plugins load first, so a later lookup miss does not quietly bring their entries back
        load_plugins()
        self._items.clear()

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._items)})"


def _describe(obj: Any) -> str:
    mod = getattr(obj, "__module__", "?")
    qual = getattr(obj, "__qualname__", type(obj).__name__)
    return f"{mod}.{qual}"
