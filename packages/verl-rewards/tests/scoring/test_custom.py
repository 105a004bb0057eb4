import pickle  # noqa: F401 - cloudpickle round trip below

import cloudpickle
import pytest
from verl.rewards.scoring.custom import load_custom_reward_function


def _write(tmp_path, text, name="my_reward.py"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_loads_function_and_binds_reward_kwargs(tmp_path):
    path = _write(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
        "    return float(solution_str == ground_truth) + bonus\n",
    )
    fn = load_custom_reward_function(path, "compute_score", {"bonus": 0.5})
    assert fn("src", "a", "a") == 1.5
    assert fn("src", "a", "b", extra_info={}) == 0.5
    # Travels by value to worker processes that cannot import the user's file by name.
    assert cloudpickle.loads(cloudpickle.dumps(fn))("s", "x", "x") == 1.5


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"reward.custom_reward_function.path=.*nope.py"):
        load_custom_reward_function(str(tmp_path / "nope.py"))


def test_missing_function_lists_the_ones_there(tmp_path):
    path = _write(tmp_path, "def score_it(a, b, c, extra_info=None):\n    return 0.0\n")
    with pytest.raises(AttributeError, match=r"name='compute_score'.*\['score_it'\]"):
        load_custom_reward_function(path)


def test_wrong_signature(tmp_path):
    path = _write(tmp_path, "def compute_score(solution_str):\n    return 0.0\n")
    with pytest.raises(
        TypeError, match=r"compute_score\(solution_str\).*cannot be called as compute_score\(data_source"
    ):
        load_custom_reward_function(path)


def test_unknown_reward_kwarg_is_a_signature_error(tmp_path):
    path = _write(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n",
    )
    with pytest.raises(TypeError, match=r"reward_kwargs \['scale'\]"):
        load_custom_reward_function(path, reward_kwargs={"scale": 2})


def test_import_error_names_the_file(tmp_path):
    path = _write(tmp_path, "import not_a_real_module_xyz\n")
    with pytest.raises(ImportError, match=r"my_reward.py.*ModuleNotFoundError"):
        load_custom_reward_function(path)


def test_batched_signature(tmp_path):
    path = _write(
        tmp_path,
        "def compute_score(data_sources, solution_strs, ground_truths, extra_infos, **kw):\n"
        "    return [float(s == g) for s, g in zip(solution_strs, ground_truths)]\n",
    )
    fn = load_custom_reward_function(path, batched=True)
    assert fn(data_sources=["a"], solution_strs=["x"], ground_truths=["x"], extra_infos=[None]) == [1.0]
    with pytest.raises(TypeError, match="data_sources, solution_strs"):
        load_custom_reward_function(
            _write(tmp_path, "def compute_score(a, b, c, extra_info=None):\n    return 0\n", "x.py"),
            batched=True,
        )
