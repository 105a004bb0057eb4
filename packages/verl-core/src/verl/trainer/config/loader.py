"""Build the trainer config from the packaged defaults, ``--config`` files and ``key=value`` overrides.

Order (later wins): schema defaults < ``ppo_trainer.yaml`` < each ``--config FILE`` < command-line overrides.
Every key is checked against the schema before it is set; all problems found (unknown keys with a
did-you-mean, values of the wrong type) are collected and raised together as one `ConfigError`.
New keys may only be added inside the schema's open dicts (fields typed ``dict[str, Any]``, e.g.
``reward.reward_kwargs``, ``actor_rollout_ref.model.override_config``); a leading ``+`` / ``++`` on an
override is accepted for Hydra compatibility and changes nothing else.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.trainer.config.schema import PPOTrainerConfig

DEFAULTS_YAML = Path(__file__).with_name("ppo_trainer.yaml")


class ConfigError(ValueError):
    """Every problem found in a config, one per line, in the user's terms."""

    def __init__(self, problems: list[str], header: str = "invalid config"):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"{header} ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):\n{lines}"
        )


def schema_defaults(schema: type = PPOTrainerConfig) -> DictConfig:
    """The schema's defaults as a typed (structured) DictConfig, interpolations unresolved."""
    return OmegaConf.structured(schema)


def load_config(
    argv: list[str] | None = None,
    *,
    schema: type = PPOTrainerConfig,
    defaults_yaml: str | Path | None = DEFAULTS_YAML,
) -> DictConfig:
    """Parse ``argv`` (``key=value``, ``+key=value``, ``--config FILE``) into a resolved, typed DictConfig.

    The result is not yet validated nor read-only: call `validate_config` on it once, before use.
    Raises `ConfigError` listing every unknown key / bad value, and `FileNotFoundError` for a missing file.
    """
    files, overrides, problems = _split_argv(list(argv or []))
    cfg = schema_defaults(schema)
    if defaults_yaml is not None:
        cfg = OmegaConf.merge(cfg, OmegaConf.load(defaults_yaml))
    for path in files:
        if not Path(path).is_file():
            raise FileNotFoundError(f"--config {path}: no such file")
        loaded = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        if not isinstance(loaded, dict):
            problems.append(
                f"--config {path}: the file must hold a mapping of sections, got {type(loaded).__name__}"
            )
            continue
        for key, value in _leaves(cfg, loaded, ""):
            _set(cfg, key, value, f"in {path}", problems)
    for key, raw in overrides:
        plus = key.startswith("+")
        where = "on the command line" + (
            f"; '+' adds keys only inside open dicts: {', '.join(_open_dicts(cfg))}" if plus else ""
        )
        _set(cfg, key.lstrip("+"), _parse_value(raw), where, problems)
    if problems:
        raise ConfigError(problems)
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError([f"cannot resolve an interpolation: {_first_line(e)}"]) from e
    return cfg


def config_to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML, to record a run's settings next to its outputs (and reload with --config)."""
    return OmegaConf.to_yaml(cfg, resolve=True)


# ------------------------------------------------------------------------------------------ helpers
def _split_argv(argv: list[str]) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    files: list[str] = []
    overrides: list[tuple[str, str]] = []
    problems: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config":
            if i + 1 >= len(argv):
                problems.append("--config needs a file path after it")
            else:
                files.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
        elif "=" in arg and not arg.startswith("-"):
            key, raw = arg.split("=", 1)
            if not key.lstrip("+"):
                problems.append(f"{arg!r}: missing key before '='")
            else:
                overrides.append((key, raw))
        else:
            problems.append(f"unrecognised argument {arg!r}; expected key=value, +key=value or --config FILE")
        i += 1
    return files, overrides, problems


def _parse_value(raw: str) -> Any:
    # OmegaConf's own grammar: 1e-6 is a float, [a,b] a list, null is None, ${x} stays an interpolation.
    return OmegaConf.to_container(OmegaConf.from_dotlist([f"v={raw}"]), resolve=False)["v"]


def _is_open(node: Any) -> bool:
    """True for dict fields typed ``dict[str, Any]`` (new keys allowed), False for dataclass sections."""
    return isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict


def _leaves(cfg: DictConfig, data: dict, prefix: str):
    """Flatten a loaded file into (dotted key, value), descending only into the schema's typed sections."""
    for k, v in data.items():
        key = f"{prefix}{k}"
        node = OmegaConf.select(cfg, key, default=None, throw_on_missing=False) if _known(cfg, key) else None
        if isinstance(v, dict) and isinstance(node, DictConfig) and not _is_open(node):
            yield from _leaves(cfg, v, key + ".")
        else:
            yield key, v


def _known(cfg: DictConfig, key: str) -> bool:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node._get_node(part)
    return True


def _set(cfg: DictConfig, key: str, value: Any, where: str, problems: list[str]) -> None:
    node: Any = cfg
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if _is_open(node):
            break  # inside an open dict: any new key is fine
        if not isinstance(node, DictConfig):
            parent = ".".join(parts[:depth])
            problems.append(f"{key} ({where}): {parent} is a value, not a section, so it has no key {part!r}")
            return
        if part not in node:
            problems.append(f"unknown key {key!r} ({where}){_did_you_mean(cfg, key, depth)}")
            return
        node = node._get_node(part)
    if isinstance(node, ListConfig) and isinstance(value, str) and not value.startswith("${"):
        value = [value]  # upstream scripts write trainer.logger=console for a one-element list
    try:
        OmegaConf.update(cfg, key, value, merge=True, force_add=False)
    except OmegaConfBaseException as e:
        problems.append(f"{key}={value!r} ({where}): {_first_line(e)}")


def _all_keys(cfg: DictConfig) -> list[str]:
    out: list[str] = []

    def walk(node: DictConfig, prefix: str) -> None:
        for k in node.keys():
            key = f"{prefix}{k}"
            out.append(key)
            child = node._get_node(k)
            if isinstance(child, DictConfig) and not _is_open(child):
                walk(child, key + ".")

    walk(cfg, "")
    return out


def _open_dicts(cfg: DictConfig) -> list[str]:
    return [k for k in _all_keys(cfg) if _is_open(OmegaConf.select(cfg, k, throw_on_missing=False))]


def _did_you_mean(cfg: DictConfig, key: str, bad_depth: int) -> str:
    parts = key.split(".")
    all_keys = _all_keys(cfg)
    found: list[str] = []
    # 1) a typo in one part: replace it by its closest sibling and keep the rest if that exists.
    parent = ".".join(parts[:bad_depth])
    siblings = list(OmegaConf.select(cfg, parent).keys()) if parent else list(cfg.keys())
    for close in difflib.get_close_matches(parts[bad_depth], [str(s) for s in siblings], n=2, cutoff=0.6):
        cand = ".".join(parts[:bad_depth] + [close] + parts[bad_depth + 1 :])
        found.append(cand if cand in all_keys else ".".join(parts[:bad_depth] + [close]))
    # 2) a missing prefix (actor.ppo_epochs -> actor_rollout_ref.actor.ppo_epochs).
    found += [k for k in all_keys if k.endswith("." + key)]
    # 3) the same leaf name somewhere else, then a fuzzy match on the whole dotted key.
    if not found:
        found += [k for k in all_keys if k.rsplit(".", 1)[-1] == parts[-1]]
    if not found:
        ancestors = {".".join(parts[:i]) for i in range(1, len(parts))}
        found += difflib.get_close_matches(key, [k for k in all_keys if k not in ancestors], n=2, cutoff=0.6)
    uniq = list(dict.fromkeys(found))[:3]
    if not uniq:
        return f"; {parent or 'the top level'} has: {', '.join(map(str, siblings))}"
    return "; did you mean " + " or ".join(repr(s) for s in uniq) + "?"


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
