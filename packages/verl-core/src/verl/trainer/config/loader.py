"""Build the trainer config from the packaged defaults, config files and command-line overrides.

Order (later wins): schema defaults < ``ppo_trainer.yaml`` < upstream's keys we accept only at their default
(``upstream.py``) < ``--config-path/--config-name`` (a user's Hydra-style yaml) < each ``--config FILE`` <
command-line overrides. The command line takes Hydra's forms, as upstream verl's ``main_ppo`` does:

    key=value     override a key that exists (new keys only inside the schema's open dicts)
    +key=value    add a key inside an open dict; an error when the key already exists (as Hydra)
    ++key=value   add or override
    ~key          delete: removes an open dict's entry; a typed key goes back to its default
    ~key=value    the same, only if the key currently holds that value
    --config-path=DIR --config-name=NAME    NAME.yaml under DIR (its ``defaults`` list may name
                  ppo_trainer / ppo_megatron_trainer and other yamls under DIR), or upstream's own
                  ``ppo_trainer`` / ``ppo_megatron_trainer`` when DIR has no such file
    hydra.run.dir=DIR hydra.output_subdir=NAME hydra.job.chdir=false
                  Hydra's run directory, written by ``main_ppo`` (``hydra_run``); other ``hydra.*`` refused

Upstream spellings we renamed are rewritten (``upstream.ALIASES``). Every problem found (unknown keys with a
did-you-mean, wrong forms, values of the wrong type) is collected and raised together as one `ConfigError`.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from omegaconf import BooleanNode, DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from verl.trainer.config import not_implemented, upstream
from verl.trainer.config.hydra_run import split_hydra
from verl.trainer.config.keys import (
    ConfigError,
    all_keys,
    did_you_mean,
    first_line,
    is_open,
    is_upstream_key,
    known,
    leaf_keys,
    open_dicts,
)
from verl.trainer.config.schema import PPOTrainerConfig

DEFAULTS_YAML = Path(__file__).with_name("ppo_trainer.yaml")
_MEGATRON_STRATEGY = ("actor_rollout_ref.actor.strategy", "critic.strategy")

__all__ = [
    "DEFAULTS_YAML",
    "ConfigError",
    "config_to_yaml",
    "full_defaults",
    "load_config",
    "schema_defaults",
]


def schema_defaults(schema: type = PPOTrainerConfig) -> DictConfig:
    """The schema's defaults as a typed (structured) DictConfig, interpolations unresolved."""
    return OmegaConf.structured(schema)


def full_defaults(
    schema: type = PPOTrainerConfig,
    defaults_yaml: str | Path | None = DEFAULTS_YAML,
    config_name: str = "ppo_trainer",
) -> DictConfig:
    """Schema defaults < packaged yaml < upstream's keys we accept only at their default (for the PPO
    schema and its recipe subclasses) < the megatron strategies for ``config_name=ppo_megatron_trainer``.
    Interpolations unresolved."""
    return copy.deepcopy(
        _full_defaults(schema, None if defaults_yaml is None else str(defaults_yaml), config_name)
    )


@functools.lru_cache(maxsize=16)
def _full_defaults(schema: type, defaults_yaml: str | None, config_name: str) -> DictConfig:
    cfg = schema_defaults(schema)
    if defaults_yaml is not None:
        cfg = OmegaConf.merge(cfg, OmegaConf.load(defaults_yaml))
    if isinstance(schema, type) and issubclass(schema, PPOTrainerConfig):
        _add_upstream_keys(cfg, config_name)
        if config_name == "ppo_megatron_trainer":
            for key in _MEGATRON_STRATEGY:
                OmegaConf.update(cfg, key, "megatron")
    return cfg


def load_config(
    argv: list[str] | None = None,
    *,
    schema: type = PPOTrainerConfig,
    defaults_yaml: str | Path | None = DEFAULTS_YAML,
) -> DictConfig:
    """Parse ``argv`` (see the module doc) into a resolved, typed DictConfig.

    The result is not yet validated nor read-only: call `validate_config` on it once, before use.
    Raises `ConfigError` listing every problem, and `FileNotFoundError` for a missing file.
    """
    # Hydra's own hydra.* settings: the run directory is main_ppo's to write (hydra_run); others refused
    argv, _, hydra_problems = split_hydra(list(argv or []))
    args = _parse_argv(argv)
    problems = hydra_problems + list(args.problems)
    touched: set[str] = set()  # keys the user set (upstream's mirrors they did not set follow their source)
    base, named_files = "ppo_trainer", []
    if args.config_name is not None:
        base, named_files = _resolve_config_name(args.config_path, args.config_name, problems)
    cfg = full_defaults(schema, defaults_yaml, base)
    for path, data in named_files:
        _merge_file(cfg, data, f"in {path}", problems, touched)
    for path in args.files:
        if not Path(path).is_file():
            raise FileNotFoundError(f"--config {path}: no such file")
        loaded = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        if not isinstance(loaded, dict):
            problems.append(
                f"--config {path}: the file must hold a mapping of sections, got {type(loaded).__name__}"
            )
            continue
        _merge_file(cfg, loaded, f"in {path}", problems, touched)
    for op, key, raw in args.overrides:
        _apply_override(cfg, op, key, raw, schema, defaults_yaml, base, problems, touched)
    if problems:
        raise ConfigError(problems)
    not_implemented.refresh_mirrors(cfg, touched)
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError([f"cannot resolve an interpolation: {first_line(e)}"]) from e
    return cfg


def config_to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML, to record a run's settings next to its outputs (and reload with --config).

    Upstream's keys that we accept only at their default are left out: a validated config holds them at
    that default, and reloading the file restores them."""
    data = OmegaConf.to_container(cfg, resolve=True)
    _drop_upstream(cfg, data)
    return OmegaConf.to_yaml(OmegaConf.create(data))


def _drop_upstream(node: DictConfig, data: dict) -> None:
    for k in list(data):
        child = node._get_node(k)
        if child._get_node_flag("verl_upstream"):
            del data[k]
        elif isinstance(child, DictConfig) and not is_open(child) and isinstance(data[k], dict):
            _drop_upstream(child, data[k])


# ------------------------------------------------------------------------------------ command line
class _Args:
    def __init__(self) -> None:
        self.files: list[str] = []
        self.overrides: list[tuple[str, str, str | None]] = []  # (op in "", "+", "++", "~"; key; raw value)
        self.problems: list[str] = []
        self.config_path: str | None = None
        self.config_name: str | None = None


_VALUE_FLAGS = {
    "--config": "files",
    "--config-path": "config_path",
    "-cp": "config_path",
    "--config-name": "config_name",
    "-cn": "config_name",
}


def _parse_argv(argv: list[str]) -> _Args:
    args = _Args()
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")
        if flag in _VALUE_FLAGS:
            if eq:
                value = inline
            elif i + 1 < len(argv):
                value, i = argv[i + 1], i + 1
            else:
                args.problems.append(f"{flag} needs a value after it")
                break
            if _VALUE_FLAGS[flag] == "files":
                args.files.append(value)
            else:
                setattr(args, _VALUE_FLAGS[flag], value)
        elif arg.startswith("~"):
            key, _, raw = arg[1:].partition("=")
            args.overrides.append(("~", key, raw if "=" in arg else None))
        elif "=" in arg and not arg.startswith("-"):
            op = "++" if arg.startswith("++") else "+" if arg.startswith("+") else ""
            key, raw = arg[len(op) :].split("=", 1)
            if not key or key.startswith("+"):
                args.problems.append(f"{arg!r}: expected key=value, +key=value, ++key=value or ~key")
            else:
                args.overrides.append((op, key, raw))
        else:
            args.problems.append(
                f"unrecognised argument {arg!r}; expected key=value, +key=value, ++key=value, ~key, "
                "--config FILE or --config-path=DIR --config-name=NAME"
            )
        i += 1
    return args


def _parse_value(raw: str) -> Any:
    # OmegaConf's own grammar: 1e-6 is a float, [a,b] a list, null is None, ${x} stays an interpolation.
    return OmegaConf.to_container(OmegaConf.from_dotlist([f"v={raw}"]), resolve=False)["v"]


def _apply_override(cfg, op, key, raw, schema, defaults_yaml, base, problems, touched) -> None:
    form = f"{op}{key}" + ("" if raw is None else f"={raw}")
    try:
        value = None if raw is None else _parse_value(raw)
    except OmegaConfBaseException as e:
        problems.append(f"{form}: cannot parse the value: {first_line(e)}")
        return
    if upstream.alias_of(key) and op != "~":
        target, value = upstream.resolve_alias(key, value)
        if target is None:
            return
        key = target
    exists, in_open = known(cfg, key), _inside_open_dict(cfg, key)
    if op != "~" and _under_our_value(cfg, key, value, form, problems):
        return
    if op == "+":
        if exists:
            problems.append(
                f"{form}: could not append to config, an item is already at {key!r}; "
                f"use {key}={raw} to override it or ++{key}={raw} to add or override"
            )
            return
        where = f"on the command line ({form}); '+' adds keys only inside open dicts: {', '.join(open_dicts(cfg))}"
        _set(cfg, key, value, where, problems)
        touched.add(key)
    elif op == "~":
        _delete(
            cfg, key, value, raw, form, exists, in_open, full_defaults(schema, defaults_yaml, base), problems
        )
    else:
        where = f"on the command line ({form})"
        if not exists and not in_open and op == "":
            where += f"; to add a key inside an open dict use +{key}={raw}"
        _set(cfg, key, value, where, problems)
        touched.add(key)


def _delete(cfg, key, value, raw, form, exists, in_open, defaults, problems) -> None:
    if not exists:
        problems.append(f"{form}: could not delete from config, {key!r} does not exist")
        return
    current = OmegaConf.select(cfg, key, throw_on_missing=False)
    current = (
        OmegaConf.to_container(current, resolve=False)
        if isinstance(current, (DictConfig, ListConfig))
        else current
    )
    if raw is not None and current != value:
        problems.append(
            f"{form}: could not delete from config, the value of {key!r} is {current!r} and not {value!r}"
        )
        return
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    if in_open and is_open(parent):
        del parent[leaf]  # an open dict's entry: really removed
    else:  # every typed key always exists: deleting it restores its default
        OmegaConf.update(cfg, key, OmegaConf.select(defaults, key, throw_on_missing=False), merge=False)


# ------------------------------------------------------------------------------------------ files
def _resolve_config_name(config_path: str | None, name: str, problems: list[str]) -> tuple[str, list]:
    """(upstream base config, [(file, content)] in merge order) for ``--config-name`` (Hydra-style)."""
    name = name.strip("'\"").removesuffix(".yaml")
    directory = Path(config_path.strip("'\"")) if config_path else Path(".")
    base = ["ppo_trainer"]
    files: list[tuple[str, dict]] = []
    _collect(directory, name, base, files, problems, seen=set())
    return base[0], files


def _collect(directory: Path, name: str, base: list, files: list, problems: list, seen: set) -> None:
    path = directory / f"{name}.yaml"
    if not path.is_file():
        if name in upstream.CONFIG_NAMES:
            base[0] = name
        else:
            problems.append(
                f"--config-name={name}: no {path}; the names without a file are upstream's "
                f"{' and '.join(upstream.CONFIG_NAMES)}"
            )
        return
    if path in seen:
        problems.append(f"{path}: its defaults list includes itself")
        return
    seen.add(path)
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    if not isinstance(data, dict):
        problems.append(f"{path}: the file must hold a mapping of sections, got {type(data).__name__}")
        return
    hydra = data.pop("hydra", None) or {}
    for k in hydra:
        if k != "searchpath":  # searchpath only locates ppo_trainer, which we ship
            problems.append(f"{path}: hydra.{k} is not supported (only hydra.searchpath is accepted)")
    defaults = data.pop("defaults", None) or []
    if "_self_" not in defaults:
        defaults = [*defaults, "_self_"]  # Hydra >= 1.1: the file's own keys win over its defaults
    for entry in defaults:
        if entry == "_self_":
            files.append((str(path), data))
        elif isinstance(entry, str):
            _collect(directory, entry.removesuffix(".yaml"), base, files, problems, seen)
        else:
            problems.append(
                f"{path}: defaults entry {entry!r}: only names of yamls under --config-path, "
                f"{', '.join(upstream.CONFIG_NAMES)} and _self_ are supported (upstream's component groups "
                "are already part of ppo_trainer)"
            )


def _merge_file(cfg: DictConfig, data: dict, where: str, problems: list[str], touched: set[str]) -> None:
    for key, value in _leaves(cfg, data, ""):
        if key.rsplit(".", 1)[-1] == "_target_":
            continue  # Hydra's instantiation marker names upstream's class, not a setting
        if upstream.alias_of(key):
            target, value = upstream.resolve_alias(key, value)
            if target is None:
                continue
            key = target
        if _under_our_value(cfg, key, value, f"{key} ({where})", problems):
            continue
        _set(cfg, key, value, where, problems)
        touched.add(key)


def _leaves(cfg: DictConfig, data: dict, prefix: str):
    """Flatten a loaded file into (dotted key, value), descending into the schema's typed sections and
    into the sections that hold upstream aliases."""
    for k, v in data.items():
        key = f"{prefix}{k}"
        node = OmegaConf.select(cfg, key, default=None, throw_on_missing=False) if known(cfg, key) else None
        typed = isinstance(node, DictConfig) and not is_open(node)
        if isinstance(v, dict) and (typed or key in upstream.aliased_prefixes()):
            yield from _leaves(cfg, v, key + ".")
        else:
            yield key, v


# ---------------------------------------------------------------------------------------- setting
def _under_our_value(cfg: DictConfig, key: str, value: Any, form: str, problems: list[str]) -> bool:
    """Upstream keys under a key that is a plain value here (upstream's ``reward.reward_manager.source``,
    ours ``reward.reward_manager`` is the name): accepted at upstream's default (dropped), else refused.
    True when ``key`` was such a key."""
    if known(cfg, key) or _inside_open_dict(cfg, key) or not upstream.is_upstream_key(key):
        return False
    default = upstream.upstream_default(key)
    if value != default:
        problems.append(
            f"{form}: {upstream.refusal(key, in_schema=False)} (accepted only at its default, {default!r})"
        )
    return True


# ---------------------------------------------------------------------------------------- setting
def _inside_open_dict(cfg: DictConfig, key: str) -> bool:
    node: Any = cfg
    for part in key.split("."):
        if is_open(node):
            return True
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node._get_node(part)
    return False


def _set(cfg: DictConfig, key: str, value: Any, where: str, problems: list[str]) -> None:
    node: Any = cfg
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if is_open(node):
            break  # inside an open dict: any new key is fine
        if not isinstance(node, DictConfig):
            parent = ".".join(parts[:depth])
            problems.append(f"{key} ({where}): {parent} is a value, not a section, so it has no key {part!r}")
            return
        if part not in node:
            problems.append(f"unknown key {key!r} ({where}){did_you_mean(cfg, key, depth)}")
            return
        node = node._get_node(part)
    if isinstance(node, ListConfig) and isinstance(value, str) and not value.startswith("${"):
        value = [value]  # upstream scripts write trainer.logger=console for a one-element list
    if isinstance(node, BooleanNode) and value == "":
        value = (
            False  # `key=$UNSET_VAR` in upstream's scripts: an empty string, which upstream reads as false
        )
    try:
        OmegaConf.update(cfg, key, value, merge=True, force_add=False)
    except OmegaConfBaseException as e:
        problems.append(f"{key}={value!r} ({where}): {first_line(e)}")


# ------------------------------------------------------------------------------- upstream's keys
def _add_upstream_keys(cfg: DictConfig, config_name: str) -> None:
    """Add upstream's leaf keys that the schema lacks, at upstream's default (see ``upstream.py``), as
    closed sections (no new keys under them). Defaults that are interpolations (upstream's mirrors such as
    ``actor.rollout_n: ${oc.select:actor_rollout_ref.rollout.n,1}``) are stored resolved against our
    defaults: resolving ~150 more interpolations on every load costs seconds, and validation compares a
    changed value with the interpolation evaluated in the user's config."""
    extra: dict[str, Any] = {}
    keys = _upstream_only_keys(cfg)
    for key in keys:
        node = extra
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = upstream.upstream_default(key, config_name)
    with open_dict(cfg):
        for section, value in extra.items():
            _graft(cfg, section, value)
    interpolated = [k for k in keys if _is_interpolation(upstream.upstream_default(k, config_name))]
    values = {}
    for key in interpolated:
        value = OmegaConf.select(cfg, key)
        values[key] = OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value
    for key, value in values.items():
        not_implemented.set_upstream_value(cfg, key, value)


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _graft(parent: DictConfig, key: str, value: Any) -> None:
    if key in parent and isinstance(value, dict):
        child = parent._get_node(key)
        for k, v in value.items():
            with open_dict(child):
                _graft(child, k, v)
        return
    parent[key] = value
    # marks the node as upstream's (a closed section for is_open; refused at non-default by validation)
    parent._get_node(key)._set_flag("verl_upstream", True)


def _upstream_only_keys(cfg: DictConfig) -> list[str]:
    ours = set(all_keys(cfg))
    closed = {k for k in ours if _is_section(cfg, k)}  # typed sections: upstream keys may be added there
    keys: dict[str, None] = {}
    for name in upstream.CONFIG_NAMES:
        for key in upstream.upstream_defaults()[name]:
            if key in upstream.ALIASES or key in keys or key in ours:
                continue
            # skip keys under our open dicts or plain values (upstream's rollout.engine_kwargs.vllm lives
            # in our open dict rollout.engine_kwargs): the first existing prefix must be a typed section
            parts = key.split(".")
            prefixes = [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
            deepest = next((p for p in prefixes if p in ours), "")
            if deepest == "" or deepest in closed:
                keys[key] = None
    return list(keys)


def _is_section(cfg: DictConfig, key: str) -> bool:
    node = OmegaConf.select(cfg, key, throw_on_missing=False)
    return isinstance(node, DictConfig) and not is_open(node)


def upstream_only_keys(cfg: DictConfig) -> list[str]:
    """Leaf keys of ``cfg`` that come from upstream's tree, not our schema (accepted at their default)."""
    return [k for k in leaf_keys(cfg) if is_upstream_key(cfg, k)]
