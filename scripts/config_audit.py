"""The read-or-refused audit: every config key set to a non-default value is read by the run, or refused.

    uv run python scripts/config_audit.py                       # every entry point, every group
    uv run python scripts/config_audit.py --entry main_ppo --entry dapo [--work DIR] [--probe-only]

For each entry point (``main_ppo``'s CPU default and every recipe's, shortened to one step on tiny sizes;
`config_audit_recipes.ENTRIES`) and each of its groups (a context that opens the keys' gates, e.g. GAE for the
critic's keys, and the keys probed in it):

1. **probe**: the group's keys are set to non-default values (`config_audit_entries.value_for`: choices, bools,
   numbers generated from the schema, a hand-picked value where a generated one would not run) over the
   entry's CPU default and the group's context, and the entry's own loader validates them. Every key a
   problem names is *refused* (the message is kept in the report, to read); the rest are set together.
2. **run**: the entry point runs in a child process (``python -m verl.utils.config_reads``) with the accepted
   keys; the driver and every Ray worker record each config key they read after validation.
3. **check**: every leaf of the run's final config (``config.yaml``) whose value differs from the schema's
   default (resolved in that config, so a key that follows another is at its default while it follows) must
   be read. A key whose default follows another key (``critic.ppo_epochs`` -> ``actor...ppo_epochs``) and is
   read while it follows counts as a read of the key it follows (interpolations are resolved at load).

Every group also fails on a key that was accepted but never read. The "base" group of each entry probes every
schema key in the CPU default's own context, so a key that the CPU default does not read must be refused
there (a gate: ``opt(..., when=...)``); the other groups open the gates and check the keys are then read.
Why this design: a Ray worker gets a pickled copy of the config and reads it in its own process, and recipes
run their own trainers and pools (fully_async's two pools need Ray), so reads are recorded where they happen
(Ray's ``worker_process_setup_hook``, set through the config's own ``ray_kwargs.ray_init``) rather than by
running everything in one process; see ``verl.utils.config_reads`` for what counts as a read.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[1]
_ABSENT = object()
_INTERP = re.compile(r"\$\{(\.*)([\w.\-]+)\}")


def _entries_module(name: str = "config_audit_entries"):
    """A sibling script as a module (registered, so dataclasses and the siblings' imports find it)."""
    if name not in sys.modules:
        if str(Path(__file__).parent) not in sys.path:
            sys.path.insert(0, str(Path(__file__).parent))  # the siblings import each other by name
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def resolve(target: str) -> Any:
    """``module:name`` or ``module:OBJ.attr`` (a recipe's ``RECIPE``, its ``RECIPE.main``)."""
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for name in attr.split("."):
        obj = getattr(obj, name)
    return obj


# ------------------------------------------------------------------------------------ config values
def leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted path: plain value} of every leaf under ``node`` (dicts are descended, lists are leaves)."""
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: node}


def interpolation_targets(key: str, default: Any) -> list[str]:
    """The absolute keys a default such as ``${.clip_ratio}`` or ``ckpt/${trainer.project_name}`` follows."""
    if not isinstance(default, str):
        return []
    parent = key.split(".")[:-1]
    out = []
    for dots, path in _INTERP.findall(default):
        base = parent[: len(parent) - (len(dots) - 1)] if dots else []
        out.append(".".join([*base, path]))
    return out


def _has_interpolation(default: Any) -> bool:
    """Whether an open dict's default holds an interpolation at some depth (a teacher's mirrors)."""
    if isinstance(default, dict):
        return any(_has_interpolation(v) for v in default.values())
    return isinstance(default, str) and "${" in default


def resolved_defaults(schema: type, cfg: DictConfig) -> dict[str, Any]:
    """{leaf path: the schema's default, interpolations resolved against ``cfg``} (open dicts descended)."""
    from verl.trainer.config import schema_fields

    live = copy.deepcopy(cfg)
    OmegaConf.set_readonly(live, False)
    out: dict[str, Any] = {}
    for key, info in schema_fields(schema).items():
        default = info.default
        if interpolation_targets(key, default) or (isinstance(default, dict) and _has_interpolation(default)):
            kept = OmegaConf.select(live, key)
            OmegaConf.update(live, key, default, merge=False)
            default = OmegaConf.select(live, key)
            OmegaConf.update(live, key, kept, merge=False)
        if isinstance(default, (DictConfig, ListConfig)):
            default = OmegaConf.to_container(default, resolve=True)
        out.update(leaves(default, key) if isinstance(default, dict) and default else {key: default})
    return out


def non_default(schema: type, cfg: DictConfig) -> dict[str, Any]:
    """{leaf path: value} of every leaf of ``cfg`` that differs from its resolved schema default."""
    defaults = resolved_defaults(schema, cfg)
    return {k: v for k, v in leaves(cfg).items() if defaults.get(k, _ABSENT) != v}


def effective_reads(schema: type, cfg: DictConfig, reads: set[str]) -> set[str]:
    """``reads`` plus, for each key read while it follows another (at its interpolated default), the key it
    follows (transitively)."""
    from verl.trainer.config import schema_fields

    set_keys = non_default(schema, cfg)
    out = set(reads)
    changed = True
    while changed:
        changed = False
        for key, info in schema_fields(schema).items():
            if key in out and key not in set_keys:
                for target in interpolation_targets(key, info.default):
                    if target not in out:
                        out.add(target)
                        changed = True
    return out


def unread(schema: type, cfg: DictConfig, reads: set[str]) -> dict[str, Any]:
    """{key: value} set to a non-default value in ``cfg`` and never read."""
    seen = effective_reads(schema, cfg, reads)
    return {k: v for k, v in non_default(schema, cfg).items() if k not in seen}


def switched_off(schema: type, cfg: DictConfig, explicit: frozenset[str], key: str) -> bool:
    """Whether validation accepted ``key`` only because the config sets the switch of one of its shut gates
    itself (``use_kl_loss=false`` beside ``kl_loss_coef=0.0``: the config says the feature is off)."""
    from verl.trainer.config import schema_fields
    from verl.trainer.config.fields import gate_open, open_prefix

    fields = schema_fields(schema)
    info = fields.get(key) or fields.get(open_prefix(schema, key) or "")
    if info is None:
        return False
    return any(not gate.test(cfg, here) and gate_open(cfg, gate, here, explicit) for gate, here in info.gates)


# --------------------------------------------------------------------------------------------- probe
@dataclass
class GroupResult:
    entry: str
    group: str
    accepted: dict[str, Any] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    unread: dict[str, Any] = field(default_factory=dict)
    off: dict[str, Any] = field(default_factory=dict)  # unread, under a gate the config switches off itself
    explicit: frozenset[str] = frozenset()
    error: str = ""
    seconds: float = 0.0


@functools.cache
def _key_patterns(k: str) -> tuple[re.Pattern, ...]:
    """How a problem names the probed key ``k``, in order of preference (compiled once per key: a group's probe
    matches every key against every problem, many thousands of searches)."""
    patterns = [rf"(?<![\w.]){re.escape(k)}(?![\w])"]
    section, _, leaf = k.rpartition(".")
    if section:  # "section: leaf=value ..." (Megatron's sizes are reported per section)
        patterns.append(rf"(?<![\w.]){re.escape(section)}: .*(?<![\w.]){re.escape(leaf)}=")
    parts = k.split(".")
    for depth in range(len(parts) - 1, 1, -1):  # a key inside an open dict: the dict named as a whole
        patterns.append(rf"(?<![\w.]){re.escape('.'.join(parts[:depth]))}=")
    return tuple(re.compile(p) for p in patterns)


def _named(problem: str, keys: list[str]) -> list[str]:
    """The probed key a problem is about: the one it names first (a problem may name others, such as the key
    that conflicts with it or what to set instead)."""
    found = []
    for k in keys:
        m = next((m for pattern in _key_patterns(k) if (m := pattern.search(problem))), None)
        if m:
            found.append((m.start(), k))
    return [min(found)[1]] if found else []


def probe(entry, group, assets: list[str], context: list[str]) -> GroupResult:
    """Validate the group's keys over the entry's CPU default with the entry's own loader; a key named by a
    problem is refused (and dropped), the rest accepted. A problem that names none of the probed keys means
    the group's context itself is invalid: an error."""
    from verl.trainer.config import ConfigError

    mod = _entries_module()
    result = GroupResult(entry.name, group.name)
    settings = {k: v for k, v in mod.group_settings(entry, group).items()}
    base = [*entry.base, *assets, *context]
    for _ in range(8):
        argv = [*base, *(mod.override(k, v) for k, v in settings.items())]
        try:
            cfg = entry.check(argv)
        except ConfigError as e:
            hit = False
            for problem in e.problems:
                named = _named(problem, list(settings))
                for k in named:
                    result.refused[k] = problem
                    settings.pop(k, None)
                hit = hit or bool(named)
            if not hit:
                result.error = "the group's context does not validate:\n" + "\n".join(e.problems)
                return result
            continue
        result.accepted = settings
        from verl.trainer.config.fields import explicit_keys

        result.explicit = explicit_keys(cfg)
        return result
    result.error = "still invalid after 8 rounds of dropping refused keys"
    return result


# ----------------------------------------------------------------------------------------------- run
def run_group(entry, group, result: GroupResult, assets: list[str], context: list[str], work: Path,
              timeout: float, retries: int = 2) -> GroupResult:
    """Run the entry point with the accepted keys in a child process that records reads; check them."""
    from verl.utils import config_reads

    mod = _entries_module()
    out = work / entry.name / group.name
    reads_dir = out / "reads"
    run_dir = out / "run"
    argv = [*entry.base, *assets, *context, *(mod.override(k, v) for k, v in result.accepted.items()),
            f"trainer.default_local_dir={run_dir}"]
    if "trainer.worker_backend=local" not in argv:  # Ray workers record through the config's ray_init
        argv += config_reads.ray_init_overrides(reads_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "argv.json").write_text(json.dumps(argv, indent=1))
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "TOKENIZERS_PARALLELISM": "false"}
    start = time.time()
    with open(out / "log.txt", "w") as log:
        proc = subprocess.run(
            [sys.executable, "-m", "verl.utils.config_reads", str(reads_dir), entry.target, "--", *argv],
            stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=str(out),
        )
    result.seconds = time.time() - start
    if proc.returncode == 2 and retries > 0:
        # refused by the entry point itself (a config error, exit 2) beyond what its loader checks: the keys
        # its problems name are refused too, and the group runs again without them
        problems = [line[4:] for line in (out / "log.txt").read_text().splitlines() if line.startswith("  - ")]
        named = {k: p for p in problems for k in _named(p, list(result.accepted))}
        if named:
            shutil.rmtree(out)
            for k, p in named.items():
                result.refused[k] = p
                result.accepted.pop(k)
            return run_group(entry, group, result, assets, context, work, timeout, retries - 1)
    if proc.returncode != 0:
        tail = (out / "log.txt").read_text().splitlines()[-25:]
        result.error = f"the run failed (exit {proc.returncode}; {out / 'log.txt'}):\n" + "\n".join(tail)
        return result
    cfg = final_config(entry, run_dir)
    reads = config_reads.collect(reads_dir)
    for key, value in unread(entry.schema, cfg, reads).items():
        off = switched_off(entry.schema, cfg, result.explicit | {"trainer.default_local_dir"}, key)
        (result.off if off else result.unread)[key] = value
    return result


def final_config(entry, run_dir: Path) -> DictConfig:
    """The run's resolved config (``config.yaml``, written by ``run_ppo``) over the entry's schema."""
    data = OmegaConf.load(run_dir / "config.yaml")
    cfg = OmegaConf.merge(OmegaConf.structured(entry.schema), data)
    return cfg


# -------------------------------------------------------------------------------------------- report
def render(results: list[GroupResult]) -> str:
    lines = []
    for r in results:
        head = f"[{r.entry} / {r.group}] {len(r.accepted)} set and run, {len(r.refused)} refused"
        lines.append(head + (f", {r.seconds:.0f} s" if r.seconds else ""))
        if r.error:
            lines.append("  ERROR: " + r.error.replace("\n", "\n    "))
        for k, v in sorted(r.unread.items()):
            lines.append(f"  NEVER READ: {k}={v!r}")
        if r.off:
            lines.append(f"  (off by the config's own switch, kept as written: {', '.join(sorted(r.off))})")
    return "\n".join(lines)


def refusals(results: list[GroupResult]) -> str:
    return "\n".join(f"[{r.entry}/{r.group}] {k}: {msg}" for r in results for k, msg in sorted(r.refused.items()))


def audit(names: list[str] | None, work: Path, probe_only: bool = False, timeout: float = 900,
          groups: list[str] | None = None, log=print, assets_root: Path | None = None) -> list[GroupResult]:
    """Audit the named entry points (all by default) in ``work``. The tiny assets (task files, models) go to
    ``assets_root`` (default ``work/assets``): one folder shared by several audits builds each asset once."""
    results = []
    assets_root = assets_root or work / "assets"
    for entry in _entries_module("config_audit_recipes").ENTRIES:
        if names and entry.name not in names:
            continue
        assets = entry.assets(assets_root) if entry.assets else []
        for group in entry.groups:
            if groups and group.name not in groups:
                continue
            context = [c.replace("{assets}", str(assets_root)).replace("{work}", str(work)) for c in group.context]
            r = probe(entry, group, assets, context)
            if not r.error and not probe_only:
                r = run_group(entry, group, r, assets, context, work, timeout)
            log(render([r]))
            results.append(r)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entry", action="append", help="only these entry points (repeatable)")
    p.add_argument("--group", action="append", help="only these groups (repeatable)")
    p.add_argument("--work", default=None, help="working directory (default: a fresh temporary one)")
    p.add_argument("--probe-only", action="store_true", help="validate only: list what each group refuses")
    p.add_argument("--refusals", action="store_true", help="print every refusal message")
    args = p.parse_args(argv)
    import tempfile

    work = Path(args.work or tempfile.mkdtemp(prefix="config_audit_")).absolute()
    results = audit(args.entry, work, args.probe_only, groups=args.group)
    if args.refusals:
        print(refusals(results))
    bad = [r for r in results if r.error or r.unread]
    print(f"{len(results)} groups, {len(bad)} with problems (work: {work})")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
