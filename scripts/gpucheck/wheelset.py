"""Which wheels the GPU check carries: what our packages need that the GPU machine lacks, at the lock's versions.

The roots are the distributions the check imports (verl-core, verl-workers with its ``megatron`` extra,
verl-rewards) and TRL, the peer it times. Their dependency closure is read from ``uv.lock`` for CPython
3.12 on x86-64 Linux (the machine's interpreter), without descending into packages the machine already
has (``machine_packages.txt``: they come with their own dependencies) or into our workspace members (the
check puts their ``src/`` on the path). Ray is left out on purpose: its wheel (about 79 MB) is over what
a device call may carry, and the check runs ``trainer.worker_backend=local``.

No network and no pip here: ``fetch.py`` downloads what this module lists.
"""

from __future__ import annotations

import re
import tomllib
from collections import deque
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: (distribution, extras) the check imports, and the peer it times
ROOTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("verl-core", ()),
    ("verl-workers", ("megatron",)),
    ("verl-rewards", ()),
    ("trl", ()),
)

#: never carried, with the reason the report and docs give
EXCLUDED = {
    "ray": "its wheel is about 79 MB, over the 64 MiB a device call carries; the check runs "
    "trainer.worker_backend=local, which does not import Ray",
}

#: the GPU machine's interpreter, for the lock's environment markers
TARGET_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_version": "",
    "implementation_version": "3.12.3",
    "extra": "",
}


def normalize(name: str) -> str:
    """PEP 503 name: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def machine_packages(path: Path = HERE / "machine_packages.txt") -> set[str]:
    """Normalized names of the packages on the GPU machine's image."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(normalize(line))
    return names


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    #: wheel file name -> sha256 hex digest, as the lock records them
    wheel_hashes: dict[str, str]
    #: why it is carried: the root whose closure pulled it in, through whom
    via: str


def _applies(marker: str | None) -> bool:
    if not marker:
        return True
    from packaging.markers import Marker

    return Marker(marker).evaluate(TARGET_ENV)


def _lock_packages(lock: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for pkg in lock["package"]:
        out.setdefault(normalize(pkg["name"]), []).append(pkg)
    return out


def _pick(entries: list[dict], version: str | None) -> dict:
    if version is not None:
        for e in entries:
            if e.get("version") == version:
                return e
        raise KeyError(f"uv.lock has {entries[0]['name']} but not version {version}")
    if len(entries) != 1:
        raise KeyError(
            f"uv.lock has {len(entries)} versions of {entries[0]['name']} and the dependency names none: "
            f"{[e.get('version') for e in entries]}"
        )
    return entries[0]


def _is_member(pkg: dict) -> bool:
    source = pkg.get("source", {})
    return "editable" in source or "virtual" in source


def _deps(pkg: dict, extras: tuple[str, ...]) -> list[dict]:
    deps = list(pkg.get("dependencies", []))
    for extra in extras:
        if extra not in pkg.get("optional-dependencies", {}):
            raise KeyError(f"uv.lock: {pkg['name']} has no extra {extra!r}")
        deps += pkg["optional-dependencies"][extra]
    return [d for d in deps if _applies(d.get("marker"))]


def carried_pins(lock_path: Path = ROOT / "uv.lock", machine: set[str] | None = None) -> list[Pin]:
    """The wheels to carry, sorted by name (see the module doc)."""
    lock = tomllib.loads(lock_path.read_text())
    packages = _lock_packages(lock)
    machine = machine_packages() if machine is None else machine
    pins: dict[str, Pin] = {}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    # breadth first, so each pin's ``via`` is its shortest chain from the first root that needs it:
    # (name, version the dependency names, extras, the chain of names that pulled it in)
    queue: deque[tuple[str, str | None, tuple[str, ...], str]] = deque((normalize(n), None, e, n) for n, e in ROOTS)
    while queue:
        name, version, extras, via = queue.popleft()
        if (name, extras) in seen or name in EXCLUDED:
            continue
        seen.add((name, extras))
        if name not in packages:
            raise KeyError(f"{via}: {name} is not in uv.lock (run `uv lock`)")
        pkg = _pick(packages[name], version)
        root_member = _is_member(pkg)
        if not root_member and name in machine:
            continue  # on the machine, with its own dependencies
        if not root_member and name not in pins:
            hashes = {}
            for wheel in pkg.get("wheels", []):
                file = wheel["url"].rsplit("/", 1)[-1]
                hashes[file] = wheel.get("hash", "").removeprefix("sha256:")
            pins[name] = Pin(pkg["name"], pkg["version"], hashes, via)
        for dep in _deps(pkg, extras):
            dep_extras = tuple(dep.get("extra", ()))
            chain = f"{via} -> {dep['name']}"
            queue.append((normalize(dep["name"]), dep.get("version"), dep_extras, chain))
            if dep_extras:
                queue.append((normalize(dep["name"]), dep.get("version"), (), chain))
    return sorted(pins.values(), key=lambda p: normalize(p.name))
