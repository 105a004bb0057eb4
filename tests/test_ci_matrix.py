"""scripts/ci_matrix.py: the dependency graph read from pyproject files and the packages example diffs select."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .by_path import ROOT, load_module

cm = load_module(ROOT / "scripts" / "ci_matrix.py", "ci_matrix")


def _member(root: Path, rel: str, name: str, deps: list[str], extras: dict | None = None, tests: bool = True):
    d = root / rel
    d.mkdir(parents=True)
    lines = ["[project]", f'name = "{name}"', f"dependencies = {json.dumps(deps)}"]
    if extras:
        lines.append("[project.optional-dependencies]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in extras.items()]
    (d / "pyproject.toml").write_text("\n".join(lines) + "\n")
    if tests:
        (d / "tests").mkdir()


@pytest.fixture
def ws(tmp_path):
    """core <- workers, rewards; agent <- core, workers (through an extra); recipe a <- workers, rewards;
    recipe b <- agent; 'lonely' depends on nothing in the workspace and has no tests folder."""
    (tmp_path / "pyproject.toml").write_text('[tool.uv.workspace]\nmembers = ["packages/*", "recipes/*"]\n')
    _member(tmp_path, "packages/core", "Core_Pkg", ["torch>=2", "numpy"])
    _member(tmp_path, "packages/workers", "workers", ["core-pkg[tracking]>=0.1", "transformers"])
    _member(tmp_path, "packages/rewards", "rewards", ["core_pkg"])
    _member(
        tmp_path, "packages/agent", "agent", ["core-pkg"], extras={"full": ["workers ; python_version>'3'"]}
    )
    _member(tmp_path, "recipes/a", "recipe-a", ["workers", "rewards"])
    _member(tmp_path, "recipes/b", "recipe-b", ["agent"])
    _member(tmp_path, "packages/lonely", "lonely", ["requests"], tests=False)
    (tmp_path / "tests").mkdir()
    return cm.load_workspace(tmp_path), tmp_path


def test_graph_is_read_from_pyprojects(ws):
    pkgs, _ = ws
    assert {n: sorted(p.deps) for n, p in pkgs.items()} == {
        "core-pkg": [],
        "workers": ["core-pkg"],
        "rewards": ["core-pkg"],
        "agent": ["core-pkg", "workers"],
        "recipe-a": ["rewards", "workers"],
        "recipe-b": ["agent"],
        "lonely": [],
    }
    assert pkgs["recipe-a"].tests == "recipes/a/tests"


def test_core_change_affects_every_dependent(ws):
    pkgs, _ = ws
    got = cm.affected(["packages/core/src/core/protocol.py"], pkgs)
    assert got == ["agent", "core-pkg", "recipe-a", "recipe-b", "rewards", "workers", "workspace"]


def test_leaf_and_middle_changes(ws):
    pkgs, _ = ws
    assert cm.affected(["recipes/a/src/x.py"], pkgs) == ["recipe-a", "workspace"]
    assert cm.affected(["packages/rewards/src/r.py"], pkgs) == ["recipe-a", "rewards", "workspace"]
    # workers -> agent (through the extra) -> recipe b, transitively
    assert cm.affected(["packages/workers/pyproject.toml"], pkgs) == [
        "agent",
        "recipe-a",
        "recipe-b",
        "workers",
        "workspace",
    ]


def test_docs_only_changes_affect_nothing(ws):
    pkgs, _ = ws
    assert (
        cm.affected(
            ["docs/contracts.md", "README.md", "packages/core/README.md", "recipes/b/NOTES.rst"], pkgs
        )
        == []
    )
    assert cm.affected(["benchmarks/bench_x.py"], pkgs) == []


def test_unknown_and_root_paths_affect_everything(ws):
    pkgs, _ = ws
    everything = ["agent", "core-pkg", "lonely", "recipe-a", "recipe-b", "rewards", "workers", "workspace"]
    for path in ("uv.lock", "pyproject.toml", "conftest.py", ".github/workflows/ci.yml", "somewhere/new.py"):
        assert cm.affected(["docs/x.md", path], pkgs) == everything, path


def test_scripts_and_root_tests_run_the_workspace_tests(ws):
    pkgs, _ = ws
    assert cm.affected(["scripts/new_recipe.py", "tests/test_x.py"], pkgs) == ["workspace"]


def test_the_config_audit_scripts_run_every_recipe(ws):
    """Each recipe's own tests run its config audit (scripts/config_audit*.py): a change there runs them."""
    pkgs, _ = ws
    assert cm.affected(["scripts/config_audit_entries.py"], pkgs) == ["recipe-a", "recipe-b", "workspace"]


def test_matrix_skips_packages_without_tests_and_commands(ws):
    pkgs, root = ws
    entries = cm.matrix(["lonely", "recipe-a", "workspace"], pkgs, root)
    assert entries == [
        {"package": "recipe-a", "tests": "recipes/a/tests"},
        {"package": "workspace", "tests": "tests"},
    ]
    assert cm.command(entries[0], ["-x"]) == [
        "uv",
        "run",
        "--exact",
        "--package",
        "recipe-a",
        "pytest",
        "recipes/a/tests",
        "-x",
    ]
    assert cm.command(entries[1], []) == ["uv", "run", "--exact", "pytest", "tests"]
    assert cm.command(entries[0], [], frozen=True)[:6] == ["uv", "run", "--frozen", "--exact", "--package", "recipe-a"]


def test_each_package_runs_in_an_environment_of_its_own(tmp_path):
    base = {"PATH": "/bin", "VIRTUAL_ENV": "/elsewhere", "PYTHONDONTWRITEBYTECODE": "1", "UV_PROJECT_ENVIRONMENT": "/x"}
    pkg = cm.environment({"package": "recipe-a", "tests": "recipes/a/tests"}, tmp_path, base)
    assert pkg == {"PATH": "/bin", "UV_PROJECT_ENVIRONMENT": str(tmp_path / ".venvs" / "recipe-a")}
    ws = cm.environment({"package": "workspace", "tests": "tests"}, tmp_path, base)
    assert ws == {"PATH": "/bin"}  # the workspace's own .venv


def test_run_counts_no_tests_collected_as_pass(monkeypatch, capsys):
    codes = {"a": 0, "b": 5, "c": 1}

    counts = {"a": {"passed": 3}, "b": {}, "c": {"passed": 1, "failed": 2, "skipped": 1}}

    def fake_run_entry(cmd, cwd, env):
        name = cmd[cmd.index("--package") + 1]
        assert env["UV_PROJECT_ENVIRONMENT"].endswith(f".venvs/{name}")
        return codes[name], counts[name]

    monkeypatch.setattr(cm, "run_entry", fake_run_entry)
    entries = [{"package": k, "tests": f"{k}/tests"} for k in ("a", "b")]
    assert cm.run(entries, []) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 passed, 0 failed, 0 skipped"
    assert cm.run([*entries, {"package": "c", "tests": "c/tests"}], []) == 1
    out = capsys.readouterr().out
    assert "PASS  b (no tests collected, " in out and "FAIL  c (exit 1, " in out
    assert out.splitlines()[-1] == "4 passed, 2 failed, 1 skipped"


def test_pytest_closing_lines_are_counted():
    line = "======= 1 failed, 573 passed, 1 skipped, 1 warning in 725.52s (0:12:05) ========"
    assert cm.pytest_counts(line) == {"failed": 1, "passed": 573, "skipped": 1}
    assert cm.pytest_counts("40 passed, 2 deselected in 29.01s") == {"passed": 40}
    assert cm.pytest_counts("3 passed, 1 error in 2.00s") == {"passed": 3, "failed": 1}
    assert cm.pytest_counts("tests/test_x.py::test_passed PASSED [ 50%]") == {}
    assert cm.pytest_counts("no tests ran in 0.01s") == {}


def test_run_entry_echoes_output_and_reads_the_closing_line(tmp_path, capsys):
    script = tmp_path / "fake_pytest.py"
    script.write_text("print('collected 3 items')\nprint('=== 2 passed, 1 skipped in 0.10s ===')\nraise SystemExit(0)\n")
    code, counts = cm.run_entry([sys.executable, str(script)], tmp_path)
    assert code == 0 and counts == {"passed": 2, "skipped": 1}
    assert "collected 3 items" in capsys.readouterr().out


def test_real_workspace_core_change_selects_all_packages():
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "ci_matrix.py"),
            "--json",
            "--paths",
            "packages/verl-core/src/verl/protocol.py",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    names = [e["package"] for e in json.loads(out.stdout)["include"]]
    real = cm.load_workspace(ROOT)
    assert set(names) == {n for n, p in real.items() if (ROOT / p.tests).is_dir()} | {"workspace"}
    for recipe in ("verl-recipe-dapo", "verl-recipe-sppo", "verl-recipe-spin"):
        assert recipe in names and real[recipe].deps >= {"verl-core", "verl-workers", "verl-rewards"}, recipe


def test_a_pytest_that_hangs_after_its_summary_is_killed_and_fails(tmp_path, monkeypatch):
    (tmp_path / "test_hang.py").write_text(
        "import threading, time\n\n"
        "def test_leaves_a_thread():\n"
        "    threading.Thread(target=time.sleep, args=(600,)).start()\n"
    )
    monkeypatch.setattr(cm, "EXIT_GRACE_S", 3)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_hang.py")]
    code, counts = cm.run_entry(cmd, tmp_path)
    assert counts == {"passed": 1}
    assert code == 1  # the test passed, but the process had to be killed


def test_a_pytest_that_exits_keeps_its_exit_code(tmp_path):
    (tmp_path / "test_fail.py").write_text("def test_no():\n    assert False\n")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_fail.py")]
    assert cm.run_entry(cmd, tmp_path) == (1, {"failed": 1})
