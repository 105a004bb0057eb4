"""Walking the config tree: which keys exist, which sections are open, did-you-mean suggestions.

Open dicts are the schema's fields typed ``dict[str, Any]`` (``reward.reward_kwargs``, ...): any key may be
added inside them. Sections added from upstream's tree (``upstream.py``) are plain dicts too, but closed:
they carry the ``verl_upstream`` flag.
"""

from __future__ import annotations

import difflib
from typing import Any

from omegaconf import DictConfig, OmegaConf


class ConfigError(ValueError):
    """Every problem found in a config, one per line, in the user's terms."""

    def __init__(self, problems: list[str], header: str = "invalid config"):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"{header} ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):\n{lines}"
        )


def is_open(node: Any) -> bool:
    """True for dict fields typed ``dict[str, Any]`` (new keys allowed), False for dataclass sections and
    for the closed sections that come from upstream's key tree."""
    return (
        isinstance(node, DictConfig)
        and OmegaConf.get_type(node) is dict
        and not node._get_flag("verl_upstream")
    )


def known(cfg: DictConfig, key: str) -> bool:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node._get_node(part)
    return True


def all_keys(cfg: DictConfig) -> list[str]:
    """Every section and leaf key (not descending into open dicts)."""
    out: list[str] = []

    def walk(node: DictConfig, prefix: str) -> None:
        for k in node.keys():
            key = f"{prefix}{k}"
            out.append(key)
            child = node._get_node(k)
            if isinstance(child, DictConfig) and not is_open(child):
                walk(child, key + ".")

    walk(cfg, "")
    return out


def leaf_keys(cfg: DictConfig) -> list[str]:
    """Leaf keys: values, lists, open dicts and empty sections."""
    out: list[str] = []

    def walk(node: DictConfig, prefix: str) -> None:
        for k in node.keys():
            child = node._get_node(k)
            if isinstance(child, DictConfig) and not is_open(child) and len(child) > 0:
                walk(child, f"{prefix}{k}.")
            else:
                out.append(f"{prefix}{k}")

    walk(cfg, "")
    return out


def is_upstream_key(cfg: DictConfig, key: str) -> bool:
    """True when ``key`` lies in a section added from upstream's tree (not our schema)."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node._get_node(part)
        if node._get_node_flag("verl_upstream"):
            return True
    return False


def open_dicts(cfg: DictConfig) -> list[str]:
    return [k for k in all_keys(cfg) if is_open(OmegaConf.select(cfg, k, throw_on_missing=False))]


def did_you_mean(cfg: DictConfig, key: str, bad_depth: int) -> str:
    parts = key.split(".")
    keys = all_keys(cfg)
    found: list[str] = []
    # 1) a typo in one part: replace it by its closest sibling and keep the rest if that exists.
    parent = ".".join(parts[:bad_depth])
    siblings = list(OmegaConf.select(cfg, parent).keys()) if parent else list(cfg.keys())
    for close in difflib.get_close_matches(parts[bad_depth], [str(s) for s in siblings], n=2, cutoff=0.6):
        cand = ".".join(parts[:bad_depth] + [close] + parts[bad_depth + 1 :])
        found.append(cand if cand in keys else ".".join(parts[:bad_depth] + [close]))
    # 2) a missing prefix (actor.ppo_epochs -> actor_rollout_ref.actor.ppo_epochs).
    found += [k for k in keys if k.endswith("." + key)]
    # 3) the same leaf name somewhere else, then a fuzzy match on the whole dotted key.
    if not found:
        found += [k for k in keys if k.rsplit(".", 1)[-1] == parts[-1]]
    if not found:
        ancestors = {".".join(parts[:i]) for i in range(1, len(parts))}
        found += difflib.get_close_matches(key, [k for k in keys if k not in ancestors], n=2, cutoff=0.6)
    uniq = list(dict.fromkeys(found))[:3]
    if not uniq:
        return f"; {parent or 'the top level'} has: {', '.join(map(str, siblings))}"
    return "; did you mean " + " or ".join(repr(s) for s in uniq) + "?"


def first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
