"""Validation of the keys accepted only at their default (``upstream.py``), and upstream's mirror keys.

A key is at its default when its value equals the default it loaded with; a default that is an
interpolation (upstream's mirrors, ``actor.rollout_n: ${oc.select:actor_rollout_ref.rollout.n,1}``) is
evaluated in the user's config. The loader points the mirrors the user did not set at their source.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml  # PyYAML: a dependency of omegaconf

from verl.trainer.config.upstream import CONFIG_NAMES, refusal, upstream_defaults


def check_not_implemented(cfg: Any, problems: list[str]) -> None:
    """Refuse every key accepted only at its default (FEATURES, REFUSED_OURS, upstream's keys) whose value
    differs from that default. A default that is an interpolation (a mirror of another key) is evaluated
    in ``cfg``: ``actor.rollout_n=8`` is accepted when ``rollout.n=8``."""
    from omegaconf import OmegaConf

    from verl.trainer.config.schema import PPOTrainerConfig

    schema = OmegaConf.get_type(cfg)
    if not (isinstance(schema, type) and issubclass(schema, PPOTrainerConfig)):
        return
    raw = _flat_defaults(schema)
    for key, (value, flagged) in flatten(cfg).items():
        # a user's value may replace the flagged node (None -> a list): the defaults know where it came from
        from_upstream = raw[key][1] if key in raw else flagged
        reason = refusal(key, in_schema=not from_upstream)
        if reason is None:
            continue
        candidates = [raw[key][0]] if key in raw else []
        if from_upstream:
            candidates += [upstream_defaults()[n][key] for n in CONFIG_NAMES if key in upstream_defaults()[n]]
        interps = [c for c in candidates if _interp(c)]
        literals = [c for c in candidates if not _interp(c)]
        if interps:  # a mirror of another key: its default is that key's value in this config
            literals = [mirror_value(cfg, key, e) for e in interps]
        if any(value == c for c in literals):
            continue
        default = literals[0] if literals else None
        problems.append(f"{key}={value!r}: {reason} (accepted only at its default, {default!r})")


def flatten(cfg: Any) -> dict[str, tuple[Any, bool]]:
    """{leaf key: (value as stored, from upstream's tree)} in one walk; open dicts, lists and empty
    sections are leaves (plain containers), interpolations stay unresolved."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    from verl.trainer.config.keys import is_open

    out: dict[str, tuple[Any, bool]] = {}

    def walk(node: DictConfig, prefix: str, up: bool) -> None:
        for k in node.keys():
            child = node._get_node(k)
            child_up = up or bool(child._get_node_flag("verl_upstream"))
            if isinstance(child, DictConfig) and not is_open(child) and len(child) > 0:
                walk(child, f"{prefix}{k}.", child_up)
            elif isinstance(child, (DictConfig, ListConfig)):
                out[f"{prefix}{k}"] = (OmegaConf.to_container(child, resolve=False), child_up)
            else:
                out[f"{prefix}{k}"] = (child._value(), child_up)

    walk(cfg, "", False)
    return out


@functools.lru_cache(maxsize=16)
def _flat_defaults(schema: type) -> dict[str, tuple[Any, bool]]:
    """The flattened defaults of ``schema`` (interpolations unresolved: evaluated in the user's config)."""
    from verl.trainer.config.loader import DEFAULTS_YAML, full_defaults

    return flatten(full_defaults(schema, DEFAULTS_YAML))


def _interp(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def mirror_value(cfg: Any, key: str, expr: str) -> Any:
    """The value of an upstream default ``${oc.select:SOURCE,FALLBACK}`` / ``${SOURCE}`` in ``cfg`` (the
    fallback may itself be such an expression). Evaluated here, not by OmegaConf's grammar: parsing ~150
    such defaults on every load costs seconds. Anything else falls back to OmegaConf on a copy."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if not (expr.startswith("${") and expr.endswith("}")):
        return _eval_in(cfg, key, expr)
    inner = expr[2:-1]
    select = inner.startswith("oc.select:")
    source, _, fallback = inner.removeprefix("oc.select:").partition(",")
    if not re.fullmatch(r"\.?[\w.\-]+", source) or (not select and fallback):
        return _eval_in(cfg, key, expr)
    if source.startswith("."):  # relative to the key's section
        source = key.rsplit(".", 1)[0] + source
    if _interp(fallback):
        default = mirror_value(cfg, key, fallback)
    else:
        default = None if fallback in ("", "null") else yaml.safe_load(fallback)
    value = OmegaConf.select(cfg, source, default=default, throw_on_missing=False)
    return (
        OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value
    )


def refresh_mirrors(cfg: Any, touched: set[str]) -> None:
    """Point upstream's mirror keys the user did not set at their source's current value (before the
    loader resolves the config), so ``actor.rollout_n`` follows ``rollout.n=8``."""
    from verl.trainer.config.keys import is_upstream_key, known

    seen = set(touched)
    for name in CONFIG_NAMES:
        for key, expr in upstream_defaults()[name].items():
            if _interp(expr) and key not in seen and known(cfg, key) and is_upstream_key(cfg, key):
                seen.add(key)
                set_upstream_value(cfg, key, mirror_value(cfg, key, expr))


def set_upstream_value(cfg: Any, key: str, value: Any) -> None:
    """Set an upstream key's value, keeping the node's ``verl_upstream`` mark (a dict value replaces the node)."""
    from omegaconf import OmegaConf

    OmegaConf.update(cfg, key, value, merge=False)
    node = cfg
    for part in key.split("."):
        node = node._get_node(part)
    node._set_flag("verl_upstream", True)


def _eval_in(cfg: Any, key: str, expr: str) -> Any:
    import copy

    from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    scratch = copy.deepcopy(cfg)
    OmegaConf.set_readonly(scratch, False)
    try:
        with open_dict(scratch):
            OmegaConf.update(scratch, key, expr, merge=False)
        value = OmegaConf.select(scratch, key, throw_on_missing=False)
        return (
            OmegaConf.to_container(value, resolve=True)
            if isinstance(value, (DictConfig, ListConfig))
            else value
        )
    except OmegaConfBaseException:
        return object()  # cannot be evaluated here: matches nothing
