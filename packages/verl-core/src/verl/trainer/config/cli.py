"""The command line every entry point shares: ``--help``, ``--help-all``, ``--cfg job``, and config errors
as a message with exit status 2 (``VERL_DEBUG=1`` re-raises them with the traceback).

    def main(argv=None):
        run_cli(argv, prog="verl-ppo", schema=PPOTrainerConfig, main=_train, about=__doc__)

Also renders a schema's defaults as YAML (the packaged ``ppo_trainer.yaml`` / ``sft_trainer.yaml`` are this
output; a test keeps them current).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.fields import ConfigError, schema_fields, section_help
from verl.trainer.config.loader import load_config
from verl.trainer.config.schema import PPOTrainerConfig

REFERENCE = "docs/config-reference.md"
_GRAMMAR = """\
Overrides (Hydra's grammar, as upstream verl): key=value sets a key, +key=value adds one inside an open dict,
++key=value adds or sets, ~key resets a key to its default (removes an open dict's entry). Later wins:
defaults < --config-path/--config-name < --config FILE (repeatable) < key=value. Upstream verl's spellings are
accepted (renamed, or refused with the reason when we do not implement them)."""


def run_cli(
    argv: list[str] | None,
    *,
    prog: str,
    main: Callable[[list[str]], Any],
    schema: type = PPOTrainerConfig,
    load: Callable[[list[str]], DictConfig] | None = None,
    about: str = "",
) -> Any:
    """Handle the shared flags, then return ``main(argv)``. ``load(argv)`` gives the config ``--cfg job``
    prints (default: `load_config` over ``schema``). A `ConfigError` raised by ``load`` or ``main`` ends the
    process with its problems on stderr and status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--help" in argv or "-h" in argv or "--help-all" in argv:
        print(render_help(schema, prog, about, every_key="--help-all" in argv))
        raise SystemExit(0)
    try:
        if any(a == "--cfg" or a.startswith("--cfg=") for a in argv):
            what, rest = _cfg_flag(argv)
            cfg = (load or (lambda args: load_config(args, schema=schema)))(rest)
            print(OmegaConf.to_yaml(cfg, resolve=True), end="")
            raise SystemExit(0)
        return main(argv)
    except ConfigError as e:
        if os.environ.get("VERL_DEBUG") == "1":
            raise
        print(f"{prog}: {e}\n(VERL_DEBUG=1 shows the traceback; {prog} --help lists the keys)", file=sys.stderr)
        raise SystemExit(2) from None


def _cfg_flag(argv: list[str]) -> tuple[str, list[str]]:
    i = next(i for i, a in enumerate(argv) if a == "--cfg" or a.startswith("--cfg="))
    if argv[i] == "--cfg":
        what, rest = (argv[i + 1] if i + 1 < len(argv) else ""), argv[:i] + argv[i + 2 :]
    else:
        what, rest = argv[i].split("=", 1)[1], argv[:i] + argv[i + 1 :]
    if what != "job":
        raise ConfigError([f"--cfg {what}: only --cfg job (print the resolved config and exit) is supported"])
    return what, rest


def render_help(schema: type, prog: str, about: str = "", every_key: bool = False) -> str:
    """Usage, the config groups, the common keys (every key with ``every_key``) with default and help."""
    fields = schema_fields(schema)
    core = schema_fields(PPOTrainerConfig) if issubclass(schema, PPOTrainerConfig) else {}
    lines = [
        f"usage: {prog} [--config FILE] [--config-path DIR --config-name NAME] [key=value ...]",
        f"       {prog} --cfg job [key=value ...]   print the resolved config and exit",
        f"       {prog} --help-all                  every key with its default and help",
    ]
    if about.strip():
        lines += ["", about.strip().splitlines()[0]]
    lines += ["", "config groups:"]
    lines += [f"  {name:<20} {text}" for name, text in section_help(schema).items()]
    shown = {k: f for k, f in fields.items() if every_key or f.common or (core and k not in core)}
    lines += ["", "every key:" if every_key else "common keys (key=default  help):"]
    for key, info in shown.items():
        extra = f" [{' | '.join(map(_text, info.choices))}]" if info.choices else ""
        lines.append(f"  {key}={_text(info.default)}\n      {info.help}{extra}")
    lines += ["", _GRAMMAR, "", f"All keys: {prog} --help-all, or {REFERENCE} in the repository.",
              "A config error prints every problem and exits with status 2 (VERL_DEBUG=1: the traceback)."]
    return "\n".join(lines)


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return str(value)


def render_yaml(schema: type, header: str) -> str:
    """The schema's defaults as commented YAML (each key's help inline, each section's above it)."""
    out = [f"# {line}".rstrip() for line in header.strip().splitlines()]
    written: set[str] = set()
    for key, info in schema_fields(schema).items():
        parts = key.split(".")
        for depth in range(len(parts) - 1):
            sec = ".".join(parts[: depth + 1])
            if sec not in written:
                written.add(sec)
                out.append(f"{'  ' * depth}{parts[depth]}:")
        indent = "  " * (len(parts) - 1)
        if isinstance(info.default, dict) and any(isinstance(v, dict) and v for v in info.default.values()):
            # a nested open dict (e.g. distillation.teacher_models) in block style, readable line by line
            block = yaml.safe_dump(info.default, sort_keys=False, default_flow_style=False).rstrip().splitlines()
            out.append(f"{indent}{parts[-1]}:" + (f"  # {info.help}" if info.help else ""))
            out.extend(f"{indent}  {line}" for line in block)
            continue
        value = _text(info.default)
        if isinstance(info.default, str) and (value == "" or yaml.safe_load(value) != info.default):
            value = yaml.safe_dump(info.default, default_style="'").strip().removesuffix("\n...")
        comment = f"  # {info.help}" if info.help else ""
        out.append(f"{indent}{parts[-1]}: {value}{comment}")
    return "\n".join(out) + "\n"
