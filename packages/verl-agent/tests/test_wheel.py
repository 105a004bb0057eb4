"""verl-agent's wheel owns verl/agent and verl/tools, and never verl/__init__.py (verl-core's)."""

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv to build the wheel")
def test_wheel_holds_agent_and_tools_only(tmp_path):
    subprocess.run(
        ["uv", "build", "--wheel", "--out-dir", str(tmp_path), str(PACKAGE)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("verl_agent-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    code = [n for n in names if n.endswith(".py")]
    assert "verl/__init__.py" not in names
    assert {n.split("/")[1] for n in code} == {"agent", "tools"}
    for module in ("verl/tools/base_tool.py", "verl/tools/function_tool.py", "verl/tools/schemas.py",
                   "verl/tools/tool_registry.py", "verl/agent/tool_agent.py"):
        assert module in names
