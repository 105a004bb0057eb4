"""Entry of one section's process: ``section.py NAME --json FILE --work DIR --device D [--quick] --deadline T``.

Sections (each a module ``sec_<name>.py`` with ``run(ctx, recorder)``): ``machine``, ``gpu_tests``,
``correctness``, ``megatron``, ``e2e``, ``speed``. ``main.py`` runs them one after another, each in
its own process (``procs.py``), so one that crashes, hangs or exhausts the GPU's memory leaves the
others their turn.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from context import Context, Recorder  # noqa: E402

SECTIONS = ("machine", "gpu_tests", "correctness", "megatron", "e2e", "speed")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("name", choices=SECTIONS)
    ap.add_argument("--json", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--device", choices=["cuda", "cpu"], required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--deadline", type=float, required=True, help="time.time() by which the check must end")
    ap.add_argument("--option", action="append", default=[], help="KEY=VALUE for the section")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    options = dict(item.split("=", 1) for item in args.option)
    ctx = Context(device=args.device, quick=args.quick, work=work, deadline=args.deadline, options=options)
    recorder = Recorder(Path(args.json), section=args.name, started=time.strftime("%H:%M:%S"))
    module = importlib.import_module(f"sec_{args.name}")
    module.run(ctx, recorder)


if __name__ == "__main__":
    main()
