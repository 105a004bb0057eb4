"""Build the trainer config from the schema, config files and command-line overrides.

Order (later wins): the schema's defaults < ``--config-path/--config-name`` (a Hydra-style yaml whose
``defaults`` list may name ``ppo_trainer`` / ``ppo_megatron_trainer`` and other yamls under the path) < each
``--config FILE`` < command-line overrides. Overrides are parsed by Hydra's own override parser, as upstream
verl's ``main_ppo`` is a Hydra app: ``key=value``, ``+key=value`` (add inside an open dict), ``++key=value``
(add or override), ``~key`` / ``~key=value`` (an open dict's entry is removed, a typed key goes back to its
default). ``hydra.run.dir`` and its friends are ``hydra_run``'s; other ``hydra.*`` settings are refused.

Upstream's spellings are translated once, on the flat list of settings (``upstream.translate``), before
anything touches the config. Every problem (unknown keys with a did-you-mean, wrong forms, values of the
wrong type) is collected and raised together as one `ConfigError`.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.trainer.config import upstream
from verl.trainer.config.fields import ConfigError, did_you_mean, open_prefix, schema_fields, sections
from verl.trainer.config.hydra_run import split_hydra
from verl.trainer.config.schema import PPOTrainerConfig
from verl.trainer.config.upstream import Setting

DEFAULTS_YAML = Path(__file__).with_name("ppo_trainer.yaml")  # generated from the schema, for users to read
_FLAGS = {"--config": "files", "--config-path": "config_path", "-cp": "config_path", "--config-name": "config_name",
          "-cn": "config_name"}
_OPS = {"CHANGE": "", "ADD": "+", "FORCE_ADD": "++", "DEL": "~"}
_MEGATRON = ("actor_rollout_ref.actor.strategy", "critic.strategy")


def schema_defaults(schema: type = PPOTrainerConfig) -> DictConfig:
    """The schema's defaults as a typed (structured) DictConfig, interpolations unresolved."""
    return OmegaConf.structured(schema)


def load_config(argv: list[str] | None = None, *, schema: type = PPOTrainerConfig) -> DictConfig:
    """Parse ``argv`` (see the module doc) into a resolved, typed DictConfig.

    The result is not yet validated nor read-only: call `validate_config` on it once, before use.
    Raises `ConfigError` listing every problem, and `FileNotFoundError` for a missing file.
    """
    settings, problems, config_name = parse_settings(list(argv or []), schema)
    mirrors, refused = [], []
    if issubclass(schema, PPOTrainerConfig):  # upstream's keys are main_ppo's
        settings, mirrors, refused = upstream.translate(settings, lambda k: _is_ours(schema, k), config_name)
    cfg = schema_defaults(schema)
    for s in settings:
        _apply(cfg, schema, s, problems)
    if problems:
        raise ConfigError(problems + refused)
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError([f"cannot resolve an interpolation: {_first_line(e)}"]) from e
    problems = refused + upstream.check_mirrors(lambda key, default: _select(cfg, key, default), mirrors)
    if problems:
        raise ConfigError(problems)
    _EXPLICIT[id(cfg)] = frozenset(s.key for s in settings)
    weakref.finalize(cfg, _EXPLICIT.pop, id(cfg), None)
    return cfg


_EXPLICIT: dict[int, frozenset[str]] = {}


def explicit_keys(cfg: DictConfig) -> frozenset[str]:
    """The keys ``cfg``'s files and overrides set (any value, the default included); empty for a config that
    `load_config` did not make. Validation accepts a gated key when the config sets the gate's switch itself
    (`verl.trainer.config.fields.Gate`)."""
    return _EXPLICIT.get(id(cfg), frozenset())


def config_to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML, to record a run's settings next to its outputs (reload with --config)."""
    return OmegaConf.to_yaml(cfg, resolve=True)


# ------------------------------------------------------------------------------------ command line
def parse_settings(argv: list[str], schema: type = PPOTrainerConfig) -> tuple[list[Setting], list[str], str]:
    """(every setting in merge order: files, then overrides; problems; upstream base config name)."""
    argv, _, problems = split_hydra(argv)
    files, overrides, named = [], [], {}
    parser = OverridesParser.create()
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")
        if flag in _FLAGS:
            if not eq and i + 1 >= len(argv):
                problems.append(f"{flag} needs a value after it")
                break
            value = inline if eq else argv[i + 1]
            i += 1 if eq else 2
            (files.append(value) if _FLAGS[flag] == "files" else named.__setitem__(_FLAGS[flag], value))
            continue
        i += 1
        if arg.startswith("-"):
            problems.append(f"unrecognised argument {arg!r}; expected key=value, +key=value, ++key=value, ~key, "
                            "--config FILE or --config-path=DIR --config-name=NAME (--help lists them)")
            continue
        try:
            o = parser.parse_override(arg)
        except HydraException as e:
            problems.append(f"{arg!r}: {_first_line(e)}; expected key=value, +key=value, ++key=value or ~key")
            continue
        if o.is_sweep_override():
            problems.append(f"{arg!r}: a sweep (Hydra --multirun) is not supported; for a list write key=[a,b], "
                            "for a string with a comma quote it")
            continue
        overrides.append(Setting(o.key_or_group, o.value(), _OPS[o.type.name], text=arg))
    base, settings = "ppo_trainer", []
    if "config_name" in named:
        base, settings = _config_name(named.get("config_path"), named["config_name"], schema, problems)
    if base == "ppo_megatron_trainer":
        settings = [Setting(k, "megatron", "file", "--config-name=ppo_megatron_trainer") for k in _MEGATRON] + settings
    for path in files:
        if not Path(path).is_file():
            raise FileNotFoundError(f"--config {path}: no such file")
        settings += _file_settings(OmegaConf.to_container(OmegaConf.load(path), resolve=False), path, schema, problems)
    return settings + overrides, problems, base


def _file_settings(data: Any, path: str, schema: type, problems: list[str]) -> list[Setting]:
    if not isinstance(data, dict):
        problems.append(f"{path}: the file must hold a mapping of sections, got {type(data).__name__}")
        return []
    return list(_flatten(data, "", f"in {path}", schema))


def _flatten(data: dict, prefix: str, where: str, schema: type):
    """A loaded file as settings: typed sections are descended, open dicts and values are leaves; sections
    that are not ours (upstream's) are descended to their leaf keys."""
    secs = sections(schema)
    for k, v in data.items():
        key = f"{prefix}{k}"
        if k == "_target_":
            continue  # Hydra's instantiation marker names upstream's class, not a setting
        leaf = open_prefix(schema, key) is not None or upstream.is_upstream_key(key)
        if isinstance(v, dict) and (key in secs or (v and not leaf)):
            yield from _flatten(v, key + ".", where, schema)
        else:
            yield Setting(key, v, "file", where)


def _config_name(config_path: str | None, name: str, schema: type, problems: list[str]) -> tuple[str, list[Setting]]:
    """(upstream base config, settings in merge order) for ``--config-name`` (Hydra's defaults list)."""
    directory = Path(config_path.strip("'\"")) if config_path else Path(".")
    base, settings = ["ppo_trainer"], []
    _collect(directory, name.strip("'\"").removesuffix(".yaml"), base, settings, schema, problems, set())
    return base[0], settings


def _collect(directory: Path, name: str, base: list, settings: list, schema: type, problems: list, seen: set) -> None:
    path = directory / f"{name}.yaml"
    if not path.is_file():
        if name in upstream.CONFIG_NAMES:
            base[0] = name
        else:
            problems.append(f"--config-name={name}: no {path}; the names without a file are upstream's "
                            f"{' and '.join(upstream.CONFIG_NAMES)}")
        return
    if path in seen:
        problems.append(f"{path}: its defaults list includes itself")
        return
    seen.add(path)
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    if not isinstance(data, dict):
        problems.append(f"{path}: the file must hold a mapping of sections, got {type(data).__name__}")
        return
    for k in data.pop("hydra", None) or {}:
        if k != "searchpath":  # searchpath only locates ppo_trainer, which we ship
            problems.append(f"{path}: hydra.{k} is not supported (only hydra.searchpath is accepted)")
    defaults = data.pop("defaults", None) or []
    for entry in defaults if "_self_" in defaults else [*defaults, "_self_"]:  # Hydra >= 1.1: _self_ last
        if entry == "_self_":
            settings += _file_settings(data, str(path), schema, problems)
        elif isinstance(entry, str):
            _collect(directory, entry.removesuffix(".yaml"), base, settings, schema, problems, seen)
        else:
            problems.append(f"{path}: defaults entry {entry!r}: only names of yamls under --config-path, "
                            f"{', '.join(upstream.CONFIG_NAMES)} and _self_ are supported (upstream's component "
                            "groups are already part of ppo_trainer)")


# ------------------------------------------------------------------------------------------ apply
def _is_ours(schema: type, key: str) -> bool:
    return key in schema_fields(schema) or key in sections(schema) or open_prefix(schema, key) is not None


_ABSENT = object()


def _apply(cfg: DictConfig, schema: type, s: Setting, problems: list[str]) -> None:
    key, value = s.key, s.value
    fields, where = schema_fields(schema), f"{s.form} ({s.where})"
    typed = key in fields or key in sections(schema)
    in_open = not typed and open_prefix(schema, key) is not None
    exists = typed or (in_open and OmegaConf.select(cfg, key, default=_ABSENT) is not _ABSENT)
    if s.op == "~":
        _delete(cfg, schema, s, exists, in_open, problems)
        return
    if not typed and not in_open:
        leaf = next((p for p in _prefixes(key) if p in fields), None)
        if leaf is not None:
            problems.append(f"{where}: {leaf} is a value, not a section, so it has no key {key[len(leaf) + 1:]!r}")
        else:
            hint = ""
            if s.op in ("+", "++"):
                opens = sorted({k for k, f in fields.items() if f.open})
                hint = f"; '{s.op}' adds keys only inside open dicts: {', '.join(opens)}"
            problems.append(f"unknown key {key!r} ({s.where}){did_you_mean(schema, key)}{hint}")
        return
    if s.op == "+" and exists:
        problems.append(f"{where}: could not append to config, an item is already at {key!r}; use "
                        f"{s.text.lstrip('+')} to override it or +{s.text} to add or override")
        return
    info = fields.get(key)
    if info is not None and info.type.startswith("list") and isinstance(value, str) and "${" not in value:
        value = [value]  # upstream scripts write trainer.logger=console for a one-element list
    if info is not None and info.type.startswith("bool") and value == "":
        value = False  # `key=$UNSET_VAR` in upstream's scripts: an empty string, which upstream reads as false
    try:
        OmegaConf.update(cfg, key, value, merge=True, force_add=in_open)
    except OmegaConfBaseException as e:
        problems.append(f"{key}={value!r} ({s.where}): {_first_line(e)}")


def _delete(cfg: DictConfig, schema: type, s: Setting, exists: bool, in_open: bool, problems: list[str]) -> None:
    if not exists:
        problems.append(f"{s.form}: could not delete from config, {s.key!r} does not exist")
        return
    current = _select(cfg, s.key, None)
    if "=" in s.text and current != s.value:
        problems.append(f"{s.form}: could not delete from config, the value of {s.key!r} is {current!r} "
                        f"and not {s.value!r}")
        return
    parent_key, _, leaf = s.key.rpartition(".")
    if in_open:
        del OmegaConf.select(cfg, parent_key)[leaf]  # an open dict's entry: really removed
    else:  # a typed key always exists: deleting it restores its default
        OmegaConf.update(cfg, s.key, OmegaConf.select(schema_defaults(schema), s.key), merge=False)


def _prefixes(key: str) -> list[str]:
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _select(cfg: DictConfig, key: str, default: Any) -> Any:
    value = OmegaConf.select(cfg, key, default=default, throw_on_missing=False)
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
