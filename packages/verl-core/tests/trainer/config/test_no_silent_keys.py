"""No silent keys: every key the config accepts at any value is read by some package's code; the rest are
refused at validation when set (``upstream.py``). And the committed config reference is current."""

import re
from pathlib import Path

from verl.trainer.config import upstream
from verl.trainer.config.loader import full_defaults
from verl.trainer.config.not_implemented import flatten
from verl.trainer.config.reference import main as reference_main

ROOT = Path(__file__).resolve().parents[5]

#: keys read only by validation, with why that is enough
EXCEPTIONS = {
    "algorithm.rollout_correction.rollout_rs": "validation refuses any value but null (rejection sampling is "
    "not implemented)",
    "algorithm.rollout_correction.rollout_rs_threshold": "validation refuses any value but null, with rollout_rs",
    "algorithm.rollout_correction.loss_type": "validation refuses any value but ppo_clip (the only bypass loss)",
}


def _sources() -> dict[Path, str]:
    """Every package and recipe module except the config package itself (which only declares keys)."""
    files = [*ROOT.glob("packages/*/src/**/*.py"), *ROOT.glob("recipes/*/src/**/*.py")]
    return {p: p.read_text() for p in files if "verl/trainer/config/" not in p.as_posix()}


def _reads(name: str, text: str) -> bool:
    n = re.escape(name)
    return re.search(rf"\.{n}\b|\[[\"']{n}[\"']\]|[\"']{n}[\"']", text) is not None


def silent_keys() -> list[str]:
    sources = _sources()
    silent = []
    for key, (_, from_upstream) in flatten(full_defaults()).items():
        if from_upstream or upstream.refusal(key, in_schema=True) is not None or key in EXCEPTIONS:
            continue
        *parents, leaf = key.split(".")
        # the leaf's name read in a file that also names its section (fsdp_config.forward_prefetch is not
        # read because some other "forward_prefetch" is)
        parent = parents[-1] if parents else None
        if not any(_reads(leaf, t) and (parent is None or parent in t) for t in sources.values()):
            silent.append(key)
    return silent


def test_every_accepted_key_is_read_somewhere():
    assert silent_keys() == []


def test_the_check_finds_a_key_nobody_reads(monkeypatch):
    # Remove the refusal of a key nobody reads: the walk must report it.
    refused = tuple(r for r in upstream.REFUSED_OURS if r[0] != "*.fsdp_config.forward_prefetch")
    monkeypatch.setattr(upstream, "REFUSED_OURS", refused)
    assert "actor_rollout_ref.actor.fsdp_config.forward_prefetch" in silent_keys()


def test_config_reference_is_current(capsys):
    path = ROOT / "docs" / "config-reference.md"
    assert reference_main(["--check", str(path)]) == 0, capsys.readouterr().err
