"""scripts/check_architecture.py: import-linter sees every workspace package, and a new top-level module
that the contracts do not list is an error instead of going unchecked."""

import tomllib

from .by_path import ROOT, load_module

ca = load_module(ROOT / "scripts" / "check_architecture.py", "check_architecture")


def test_the_contracts_cover_every_workspace_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    found = ca.workspace_top_modules(ROOT)
    assert "verl" in found and "verl_recipe_dapo" in found
    assert found == set(config["root_packages"])
    recipes = sorted(m for m in found if m.startswith("verl_recipe_"))
    by_id = {c["id"]: c for c in config["contracts"]}
    assert sorted(by_id["recipes-on-top"]["forbidden_modules"]) == recipes
    assert sorted(by_id["no-cycles"]["ancestors"]) == sorted(["verl", *recipes])


def test_an_unlisted_package_fails_the_check(tmp_path, monkeypatch, capsys):
    text = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "recipes" / "new" / "src" / "verl_recipe_new").mkdir(parents=True)
    (tmp_path / "recipes" / "new" / "src" / "verl_recipe_new" / "__init__.py").write_text("")
    (tmp_path / "recipes" / "new" / "pyproject.toml").write_text('[project]\nname = "verl-recipe-new"\n')
    monkeypatch.setattr(ca, "ROOT", tmp_path)
    assert ca.main() == 1
    assert "lacks ['verl_recipe_new']" in capsys.readouterr().err
