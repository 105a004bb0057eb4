"""Record which config keys a run reads, in the driver and in every worker process (the config audit's probe).

What counts as a read of a key (its full dotted path from the config's root):

- its value returned to code: ``cfg.a.b``, ``cfg["b"]``, ``cfg.get("b")``, ``OmegaConf.select(cfg, "a.b")``,
  and every value of ``section.items()`` / ``.values()`` / ``dict(section)`` / ``{**section}`` (these read each
  child); a list is one value (reading the list reads the key);
- ``"b" in section``: the code consulted the key;
- ``OmegaConf.to_container`` / ``to_object`` / ``to_yaml`` of a *section*, and ``OmegaConf.create`` /
  ``merge`` with a section as a source, read every leaf under it: in this code base a converted or copied
  section is passed on whole (``ray.init(**ray_init)``, a reward manager's kwargs, a worker's engine section
  over the schema's defaults), and what reads the copy is not recorded (a copy is not read-only). A section
  converted and then only partly used would hide keys. The same conversion of the *root* is not a read: it
  is the run's record (``config.yaml``, the trackers' hyper-parameters, Hydra's run directory), written
  whatever the code uses.

Navigating to a section (``cfg.actor_rollout_ref``) and listing its keys (``keys()``, ``for k in section``)
read nothing. Only reads of a **read-only** config count: `validate_config` makes the config read-only as its
last step, so what loading and validation read (every key) is not counted, and everything after is.
Interpolations are resolved once at load time, so a key that follows another (``critic.ppo_epochs`` ->
``actor_rollout_ref.actor.ppo_epochs``) is read under its own name; the audit maps such reads back
(``scripts/config_audit.py``).

Ray workers get their own (pickled) copy of the config and read it in their own processes. Each process
that records appends every key it reads for the first time to ``<dir>/reads-<pid>.txt`` at once (a
worker killed at shutdown has already reported). A driver records with `install` (or by running an entry
point through ``python -m verl.utils.config_reads DIR module:function -- args``); Ray workers record when
started with ``runtime_env={"worker_process_setup_hook": "verl.utils.config_reads.worker_setup",
"env_vars": {"VERL_CONFIG_READS_DIR": dir}}``, which the audit passes through the config's own
``ray_kwargs.ray_init`` (so an entry point that ignores ``ray_kwargs.ray_init`` shows up as never reading it).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

ENV = "VERL_CONFIG_READS_DIR"

_lock = threading.Lock()
_local = threading.local()
_state: dict[str, Any] = {"reads": set(), "file": None, "originals": None}


def _inside() -> bool:
    return getattr(_local, "depth", 0) > 0


def _record(path: str) -> None:
    with _lock:
        if path in _state["reads"]:
            return
        _state["reads"].add(path)
        f = _state["file"]
        if f is not None:
            f.write(path + "\n")
            f.flush()


def _counts(node: Any) -> bool:
    return isinstance(node, (DictConfig, ListConfig)) and node._get_flag("readonly") is True


def _path(node: Any, key: Any = None) -> str:
    if key is None:
        return node._get_full_key(None) if node._get_parent() is not None else ""
    return node._get_full_key(key)


def _leaves(node: Any, prefix: str) -> list[str]:
    """Every leaf path under a section (a list is a leaf)."""
    if not isinstance(node, DictConfig) or node._is_none() or node._is_missing():
        return [prefix] if prefix else []
    out = []
    for key in node.keys():
        child = node._get_node(key)
        out += _leaves(child, f"{prefix}.{key}" if prefix else str(key))
    return out or ([prefix] if prefix else [])


def _guarded(fn):
    """Run an OmegaConf function with recording off inside it (its own internal reads are not the caller's)."""

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        _local.depth = getattr(_local, "depth", 0) + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _local.depth -= 1

    return inner


def install(out_dir: str | os.PathLike | None = None) -> None:
    """Start recording in this process (idempotent); with ``out_dir``, also append each new key to
    ``<out_dir>/reads-<pid>.txt``."""
    if out_dir is not None and _state["file"] is None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        _state["file"] = open(Path(out_dir) / f"reads-{os.getpid()}.txt", "a", buffering=1)  # noqa: SIM115
    if _state["originals"] is not None:
        return
    orig = {
        "_get_impl": DictConfig._get_impl,
        "__contains__": DictConfig.__contains__,
        "to_container": OmegaConf.to_container,
        "to_object": OmegaConf.to_object,
        "to_yaml": OmegaConf.to_yaml,
        "select": OmegaConf.select,
        "create": OmegaConf.create,
        "merge": OmegaConf.merge,
        "unsafe_merge": OmegaConf.unsafe_merge,
    }
    _state["originals"] = orig
    get_impl, contains = _guarded(orig["_get_impl"]), _guarded(orig["__contains__"])

    def _get_impl(self, key, default_value, validate_key=True):
        value = get_impl(self, key, default_value, validate_key)
        if not _inside() and _counts(self) and not isinstance(value, DictConfig):
            _record(_path(self, key))
        return value

    def __contains__(self, key):
        found = contains(self, key)
        if not _inside() and _counts(self) and isinstance(key, str):
            _record(_path(self, key))
        return found

    def _converter(name):
        convert = _guarded(orig[name])

        def inner(cfg, *args, **kwargs):
            if not _inside() and _counts(cfg) and cfg._get_parent() is not None:
                for leaf in _leaves(cfg, _path(cfg)):
                    _record(leaf)
            return convert(cfg, *args, **kwargs)

        return staticmethod(inner)

    def _copier(name):
        copy = _guarded(orig[name])

        def inner(*sources, **kwargs):
            if not _inside():
                for src in sources:
                    if _counts(src) and src._get_parent() is not None:
                        for leaf in _leaves(src, _path(src)):
                            _record(leaf)
            return copy(*sources, **kwargs)

        return staticmethod(inner)

    select = _guarded(orig["select"])

    def _select(cfg, key, *args, **kwargs):
        value = select(cfg, key, *args, **kwargs)
        if not _inside() and _counts(cfg) and not isinstance(value, DictConfig) and not key.startswith("."):
            base = _path(cfg)
            _record(f"{base}.{key}" if base else key)
        return value

    DictConfig._get_impl = _get_impl
    DictConfig.__contains__ = __contains__
    for name in ("to_container", "to_object", "to_yaml"):
        setattr(OmegaConf, name, _converter(name))
    for name in ("create", "merge", "unsafe_merge"):
        setattr(OmegaConf, name, _copier(name))
    OmegaConf.select = staticmethod(_select)


def uninstall() -> None:
    """Stop recording and restore OmegaConf."""
    orig = _state["originals"]
    if orig is not None:
        DictConfig._get_impl = orig["_get_impl"]
        DictConfig.__contains__ = orig["__contains__"]
        for name in ("to_container", "to_object", "to_yaml", "select", "create", "merge", "unsafe_merge"):
            setattr(OmegaConf, name, staticmethod(orig[name]))
        _state["originals"] = None
    if _state["file"] is not None:
        _state["file"].close()
        _state["file"] = None


def reads() -> set[str]:
    """The keys read in this process since `install` (or `clear`)."""
    with _lock:
        return set(_state["reads"])


def clear() -> None:
    with _lock:
        _state["reads"].clear()


def collect(out_dir: str | os.PathLike) -> set[str]:
    """Every key any recording process wrote under ``out_dir``."""
    out: set[str] = set()
    for path in Path(out_dir).glob("reads-*.txt"):
        out.update(line for line in path.read_text().splitlines() if line)
    return out


def worker_setup() -> None:
    """Ray's ``worker_process_setup_hook``: record this worker's reads under ``$VERL_CONFIG_READS_DIR``."""
    install(os.environ[ENV])


def ray_init_overrides(out_dir: str | os.PathLike) -> list[str]:
    """``key=value`` overrides that make an entry point's Ray workers record under ``out_dir``."""
    return [
        "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=verl.utils.config_reads.worker_setup",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{ENV}={out_dir}",
    ]


def main(argv: list[str] | None = None) -> None:
    """``python -m verl.utils.config_reads DIR module:function [-- args ...]``: record this process's reads
    under DIR (and tell Ray workers the same through the environment), then call ``function(args)``
    (``module:OBJ.method`` calls a method, e.g. a recipe's ``RECIPE.main``)."""
    import importlib

    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or ":" not in argv[1]:
        raise SystemExit("usage: python -m verl.utils.config_reads DIR module:function [-- args ...]")
    out_dir, target, rest = argv[0], argv[1], argv[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    os.environ[ENV] = str(Path(out_dir).absolute())
    install(out_dir)
    module, _, func = target.partition(":")
    obj = importlib.import_module(module)
    for attr in func.split("."):  # a function, or a method of a module's object (``RECIPE.main``)
        obj = getattr(obj, attr)
    obj(rest)


if __name__ == "__main__":
    main()
