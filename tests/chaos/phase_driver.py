"""A ``main_ppo`` driver whose actor/rollout worker ``RANK`` holds inside ``PHASE`` of step ``STEP`` (see
``phases.py``) until something SIGKILLs it or this driver; ``PHASE=none`` trains unmodified.

    python tests/chaos/phase_driver.py PHASE RANK STEP MARKER_DIR key=value ...

It is ``python -m verl.trainer.main_ppo key=value ...`` (``run_ppo``: its own Ray, the reaper, the same
trainer) with one worker class swapped; used by ``test_driver_kill.py`` and ``scripts/chaos_soak.py``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from phases import PHASES, with_phase_worker  # noqa: E402


def main(argv: list[str]) -> None:
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import build_role_worker_mapping, run_ppo

    if len(argv) < 4 or argv[0] not in (*PHASES, "none"):
        raise SystemExit(
            f"usage: phase_driver.py {{{'|'.join(PHASES)}|none}} RANK STEP MARKER_DIR key=value ..."
        )
    phase, rank, step, marker_dir, *overrides = argv
    cfg = load_config(overrides)
    validate_config(cfg)
    mapping = build_role_worker_mapping(cfg)
    if phase != "none":
        mapping = with_phase_worker(mapping, phase, int(rank), int(step), marker_dir)
    from verl.trainer.ppo.ray_trainer import NothingToTrainError

    try:
        run_ppo(cfg, role_worker_mapping=mapping)
    except NothingToTrainError as e:  # as main_ppo: loud and non-zero
        raise SystemExit(f"error: {e}") from e


if __name__ == "__main__":
    main(sys.argv[1:])
