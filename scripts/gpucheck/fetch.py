"""Fetch the wheels the GPU check carries into an ignored folder (``scripts/fetch_gpu_wheels``).

    python3 scripts/gpucheck/fetch.py [--dest .gpu_wheels]

Downloads exactly ``wheelset.carried_pins()`` (the lock's versions) for CPython 3.12 on manylinux
x86-64 with pip, checks each file's sha256 against ``uv.lock`` where the lock lists that wheel, builds
a pure-Python wheel from the source distribution where PyPI has no wheel, removes every other file from
the folder (two versions of one package stop the install there), and writes ``MANIFEST.json`` (the list,
sizes, hashes) and ``SOURCE.json`` (the commit of this checkout, which the check reports: the device
machine gets the working tree without ``.git``). Files already present with the right hash are kept.
Run it (it is quick when nothing changed) right before each device call.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wheelset  # noqa: E402

#: pip's --platform tags for the machine (pip matches each exactly; README of the device tool)
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35, 39)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
#: carried at most this much; the working tree itself and the model folders stay well under 64 MiB
MAX_BYTES = 32 << 20


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")


def _existing(dest: Path, pin: wheelset.Pin) -> Path | None:
    stem = wheelset.normalize(pin.name).replace("-", "_")
    for path in dest.glob("*.whl"):
        name, version = path.name.split("-")[:2]
        if wheelset.normalize(name).replace("-", "_") == stem and version == pin.version:
            expected = pin.wheel_hashes.get(path.name)
            if expected is None or expected == sha256(path):
                return path
    return None


def fetch_one(pin: wheelset.Pin, dest: Path) -> tuple[Path, str]:
    """The wheel of ``pin`` in ``dest`` (downloaded, or built from the sdist); returns it and its origin."""
    found = _existing(dest, pin)
    if found is not None:
        return found, "kept"
    spec = f"{pin.name}=={pin.version}"
    with tempfile.TemporaryDirectory() as tmp:
        platform_args = [arg for p in PLATFORMS for arg in ("--platform", p)]
        try:
            _pip("download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12", "--implementation",
                 "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none", *platform_args, "-d", tmp, spec)
            origin = "PyPI wheel"
        except RuntimeError as download_error:
            # no wheel for cp312 on PyPI: build one from the source distribution, which must be pure Python
            try:
                _pip("wheel", "--no-deps", "--no-binary", pin.name, "-w", tmp, spec)
            except RuntimeError as build_error:
                raise RuntimeError(f"{spec}: no cp312 wheel ({download_error}) and no build ({build_error})") from None
            origin = "built here from the sdist"
        files = list(Path(tmp).glob("*.whl"))
        if len(files) != 1:
            raise RuntimeError(f"{spec}: expected one wheel, pip left {[f.name for f in files]}")
        wheel = files[0]
        if origin.startswith("built") and not wheel.name.endswith("-none-any.whl"):
            raise RuntimeError(f"{spec}: the wheel built from the sdist is not pure Python ({wheel.name})")
        expected = pin.wheel_hashes.get(wheel.name)
        if expected is not None and expected != sha256(wheel):
            raise RuntimeError(f"{wheel.name}: sha256 differs from uv.lock's ({expected})")
        target = dest / wheel.name
        target.write_bytes(wheel.read_bytes())
    return target, origin


def source_info() -> dict:
    """The commit this checkout is at, and whether it has uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=wheelset.ROOT, capture_output=True, text=True).stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain")),
            "written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dest", default=str(wheelset.ROOT / ".gpu_wheels"))
    args = ap.parse_args(argv)
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    pins = wheelset.carried_pins()
    rows, keep = [], set()
    for pin in pins:
        path, origin = fetch_one(pin, dest)
        keep.add(path.name)
        rows.append({"name": pin.name, "version": pin.version, "file": path.name, "bytes": path.stat().st_size,
                     "sha256": sha256(path), "origin": origin, "needed_by": pin.via})
        print(f"{path.name:70s} {path.stat().st_size / 1e6:6.2f} MB  {origin}  ({pin.via})", flush=True)
    for stale in dest.glob("*.whl"):
        if stale.name not in keep:
            stale.unlink()
            print(f"removed {stale.name} (not in the list)", flush=True)
    total = sum(r["bytes"] for r in rows)
    if total > MAX_BYTES:
        raise SystemExit(f"{total / 2**20:.1f} MiB of wheels is over the {MAX_BYTES >> 20} MiB this check allows itself")
    manifest = {"python": "cp312", "platform": "manylinux x86_64", "wheels": rows, "total_bytes": total,
                "excluded": wheelset.EXCLUDED}
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (dest / "SOURCE.json").write_text(json.dumps(source_info(), indent=2) + "\n")
    print(f"{len(rows)} wheels, {total / 2**20:.1f} MiB in {dest}", flush=True)
    return manifest


if __name__ == "__main__":
    main()
