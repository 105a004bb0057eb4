"""The one source of every key's default, type, choices, help and refusal: the schema's dataclass fields.

A schema field is declared with `opt`: ``lr: float = opt(1e-6, "learning rate")``. Its metadata holds the
help line, the allowed values (``choices``), the reason a value other than the default is refused
(``refused``) and, for rollout-engine options, the engines that read it (``engines``). The YAML defaults,
``docs/config-reference.md``, ``--help`` and validation's choice and refusal checks all read `schema_fields`.

Defaults that follow another key are OmegaConf interpolations (``"${data.max_prompt_length}"``), resolved
once at load time. Fields typed ``dict[str, Any]`` are open dicts: ``+key.new=value`` may add keys there.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """Every problem found in a config, one per line, in the user's terms."""

    def __init__(self, problems: list[str], header: str = "invalid config"):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        n = len(self.problems)
        super().__init__(f"{header} ({n} problem{'s' if n != 1 else ''}):\n{lines}")


@dataclass(frozen=True)
class Gate:
    """Where a key is read: only when ``test(cfg, here)`` holds (``here``: the dotted path of the section that
    declares the gate). ``text(here)`` says when, naming the keys to set. Validation refuses a value other
    than the default while the gate is shut (the key would do nothing), unless the config itself sets one of
    the ``switches`` (the keys the gate tests, see `absolute`): then it says the feature is off, and its
    settings are kept as they are (upstream's ``use_kl_loss=False kl_loss_coef=0.0``)."""

    text: Callable[[str], str]
    test: Callable[[Any, str], bool]
    switches: tuple[str, ...] = ()


def absolute(here: str, key: str) -> str:
    """``key`` relative to the section ``here``: ``.x`` a key of it, ``..x`` of its parent; else as is."""
    if not key.startswith("."):
        return key
    dots = len(key) - len(key.lstrip("."))
    parts = here.split(".") if here else []
    return ".".join([*parts[: len(parts) - (dots - 1)], key.lstrip(".")])


def when(key: str, *values: Any) -> Gate:
    """Read only when ``key`` (see `absolute`) has one of ``values`` (none given: a true value)."""

    def text(here: str) -> str:
        k = absolute(here, key)
        return " or ".join(f"{k}={_text(v)}" for v in values) if values else f"{k}=true"

    def test(cfg: Any, here: str) -> bool:
        from omegaconf import OmegaConf

        value = OmegaConf.select(cfg, absolute(here, key))
        return value in values if values else bool(value)

    return Gate(text, test, (key,))


def is_set(key: str) -> Gate:
    """Read only when ``key`` (see `absolute`) is set (not null, not empty)."""
    return Gate(
        lambda here: f"{absolute(here, key)} is set", lambda cfg, here: bool(_select(cfg, absolute(here, key))), (key,)
    )


def above(key: str, bound: int) -> Gate:
    """Read only when ``key`` (see `absolute`) is greater than ``bound``."""
    return Gate(
        lambda here: f"{absolute(here, key)} > {bound}",
        lambda cfg, here: (v := _select(cfg, absolute(here, key))) is not None and v > bound,
        (key,),
    )


def below(key: str, bound: int) -> Gate:
    """Read only when ``key`` (see `absolute`) is less than ``bound``."""
    return Gate(
        lambda here: f"{absolute(here, key)} < {bound}",
        lambda cfg, here: (v := _select(cfg, absolute(here, key))) is not None and v < bound,
        (key,),
    )


def _select(cfg: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key)


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def ref(key: str) -> Any:
    """A default that follows ``key`` (an OmegaConf interpolation, typed Any for type checkers)."""
    return "${" + key + "}"


def opt(
    default: Any = None,
    help: str = "",
    *,
    choices: tuple | None = None,
    refused: str | None = None,
    engines: tuple[str, ...] | None = None,
    common: bool = False,
    when: Gate | tuple[Gate, ...] | None = None,
) -> Any:
    """A schema field. ``refused``: why any value but the default is refused (and what to use instead);
    ``engines``: the rollout engines that read the key (any other refuses a value but the default);
    ``when``: the key is read only then (`Gate`; any other value than the default is refused otherwise);
    ``common``: listed by ``--help``."""
    meta = {"help": help, "choices": choices, "refused": refused, "engines": engines, "common": common, "when": when}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, help: str = "", when: Gate | tuple[Gate, ...] | None = None, **defaults: Any) -> Any:
    """A nested section (``cls`` instance), with some of its defaults changed for this place; ``when``: every
    key under it is read only then (as `opt`'s). A section class may also declare ``READ_WHEN`` (a `Gate`,
    with ``here`` its own path) and ``OPENS`` (its keys that open the gate, not under it)."""
    return field(default_factory=lambda: cls(**defaults), metadata={"help": help, "when": when})


@dataclass(frozen=True)
class FieldInfo:
    key: str
    type: str
    default: Any
    help: str
    choices: tuple | None
    refused: str | None
    engines: tuple[str, ...] | None
    open: bool  # dict[str, Any]: new keys may be added under it
    common: bool  # listed by --help
    gates: tuple[tuple[Gate, str], ...] = ()  # (gate, the path it is relative to): read only when all hold


@functools.cache
def schema_fields(schema: type) -> dict[str, FieldInfo]:
    """{dotted leaf key: FieldInfo} of a schema, defaults taken from an instance (section overrides
    included); nested dataclasses are descended, open dicts and lists are leaves."""
    return dict(_walk(schema(), ""))


def _walk(obj: Any, prefix: str, gates: tuple = ()):
    hints = typing.get_type_hints(type(obj))
    here = prefix.rstrip(".")
    own = getattr(type(obj), "READ_WHEN", None)
    for f in dataclasses.fields(obj):
        value, t = getattr(obj, f.name), hints[f.name]
        g = gates + ((own, here),) if own is not None and f.name not in getattr(type(obj), "OPENS", ()) else gates
        own_gates = f.metadata.get("when") or ()
        g = g + tuple((gate, here) for gate in (own_gates if isinstance(own_gates, tuple) else (own_gates,)))
        if dataclasses.is_dataclass(value):
            yield from _walk(value, f"{prefix}{f.name}.", g)
            continue
        m = f.metadata
        yield f"{prefix}{f.name}", FieldInfo(
            key=f"{prefix}{f.name}", type=_type_name(t), default=value, help=m.get("help", ""),
            choices=m.get("choices"), refused=m.get("refused"), engines=m.get("engines"),
            open=typing.get_origin(t) is dict, common=m.get("common", False), gates=g,
        )


def interpolation_target(key: str, default: Any) -> str | None:
    """The key a default such as ``${data.max_prompt_length}`` or ``${.clip_ratio}`` follows (absolute), else None."""
    if isinstance(default, str) and default.startswith("${") and default.endswith("}") and default.count("${") == 1:
        return absolute(key.rsplit(".", 1)[0] if "." in key else "", default[2:-1])
    return None


def section_help(schema: type) -> dict[str, str]:
    """{top-level section: its help line} (from the root's `section` metadata, else the class docstring)."""
    out = {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        doc = (hints[f.name].__doc__ or "").strip().splitlines()
        out[f.name] = f.metadata.get("help") or (doc[0] if doc else "")
    return out


def _type_name(t: Any) -> str:
    if isinstance(t, type) and not typing.get_args(t):
        return t.__name__
    return str(t).replace("typing.", "").replace(" | ", " or ")


def open_prefix(schema: type, key: str) -> str | None:
    """The open dict ``key`` lies in (or is), else None."""
    fields = schema_fields(schema)
    parts = key.split(".")
    for i in range(1, len(parts) + 1):
        info = fields.get(".".join(parts[:i]))
        if info is not None:
            return info.key if info.open else None
    return None


@functools.cache
def sections(schema: type) -> frozenset[str]:
    """Every typed section's dotted key (not the leaves)."""
    return frozenset(".".join(k.split(".")[:i]) for k in schema_fields(schema) for i in range(1, k.count(".") + 1))


def did_you_mean(schema: type, key: str) -> str:
    """``; did you mean 'x'?`` for an unknown key: a typo in one part, a missing prefix, the same leaf
    elsewhere, or a close match of the whole key; else the keys of the deepest existing section."""
    keys = [*schema_fields(schema), *sections(schema)]
    parts = key.split(".")
    depth = next((i for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in sections(schema)), 0)
    parent = ".".join(parts[:depth])
    under = [k[len(parent) + 1 :] for k in keys if k.startswith(parent + ".")] if parent else keys
    siblings = sorted({k.split(".")[0] for k in under})
    found: list[str] = []
    for close in difflib.get_close_matches(parts[depth], siblings, n=2, cutoff=0.6):
        cand = ".".join([*parts[:depth], close, *parts[depth + 1 :]])
        found.append(cand if cand in keys else ".".join([*parts[:depth], close]))
    found += [k for k in keys if k.endswith("." + key)]
    if not found:
        found += [k for k in schema_fields(schema) if k.rsplit(".", 1)[-1] == parts[-1]]
    if not found:
        ancestors = {".".join(parts[:i]) for i in range(1, len(parts))}
        found += difflib.get_close_matches(key, [k for k in keys if k not in ancestors], n=2, cutoff=0.6)
    uniq = list(dict.fromkeys(found))[:3]
    if not uniq:
        return f"; {parent or 'the top level'} has: {', '.join(siblings)}"
    return "; did you mean " + " or ".join(repr(s) for s in uniq) + "?"
