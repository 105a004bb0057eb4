#!/usr/bin/env python3
"""Check the architecture contracts of the root ``pyproject.toml`` (``[tool.importlinter]``) with import-linter.

    uv run python scripts/check_architecture.py          # exit 0 when every contract is kept

``verl`` is verl-core's regular package, extended at import time by the sibling distributions
(``verl.workers``, ``verl.rewards``, ``verl.agent``, ``verl.tools``; DESIGN rule 1). import-linter
finds a package's folders from its import spec, which names core's folder only, so this script imports
``verl`` first and gives the spec the extended path: the graph then holds every distribution's modules.
It also fails when a workspace member's top-level module is missing from ``root_packages`` (a new
recipe would otherwise go unchecked).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def workspace_top_modules(root: Path = ROOT) -> set[str]:
    """The top-level import names the workspace members ship (``verl``, ``verl_recipe_<name>``, ...)."""
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]["members"]
    names = set()
    for pattern in globs:
        for member in root.glob(pattern):
            src = member / "src"
            if src.is_dir():
                names |= {p.name for p in src.iterdir() if (p / "__init__.py").is_file() or p.name == "verl"}
    return names


def main() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    missing = sorted(workspace_top_modules(ROOT) - set(config["root_packages"]))
    if missing:
        print(
            f"pyproject.toml [tool.importlinter] root_packages lacks {missing}: add them (and to the "
            "contracts that list every recipe) so their imports are checked",
            file=sys.stderr,
        )
        return 1
    import verl

    verl.__spec__.submodule_search_locations[:] = list(verl.__path__)
    from importlinter.cli import lint_imports

    return lint_imports(config_filename=str(ROOT / "pyproject.toml"))


if __name__ == "__main__":
    sys.exit(main())
