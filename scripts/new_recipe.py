#!/usr/bin/env python3
"""Create a new recipe package from the template: a runnable skeleton with a passing smoke test.

    python scripts/new_recipe.py NAME [--title "Paper title"]
    uv run --frozen --package verl-recipe-NAME pytest recipes/NAME/tests     # it passes as generated

Besides the folder it wires the recipe into the workspace, so the README's commands (``--frozen``
included) work at once: the root ``pyproject.toml`` gains its workspace source, its entry in the root
``dev`` group (``uv run pytest`` collects its tests) and its module in the import-linter contracts, and
``uv lock`` records it (``--no-lock`` skips that, ``--dest`` elsewhere than the workspace's recipes/ skips
the wiring).

NAME is lower case (letters, digits, ``-``/``_``); the package is ``verl-recipe-NAME`` importing as
``verl_recipe_NAME`` with the console script ``verl-NAME`` (distribution and script names spell ``_`` as
``-``, the module ``-`` as ``_``: ``fully_async`` gives ``verl-recipe-fully-async``, ``verl_recipe_fully_async``,
``verl-fully-async``; the folder keeps NAME). The skeleton holds:

    recipes/NAME/pyproject.toml      depends on verl-core, verl-workers, verl-rewards (workspace sources)
    recipes/NAME/README.md           paper, command, expected number: the acceptance bar, to fill in
    recipes/NAME/configs/cpu.yaml    the CPU default, merged over core's defaults (data and model left
                                     unset: core's built-in addition task and warm-started tiny model)
    recipes/NAME/src/verl_recipe_NAME/trainer.py   the algorithm: a RayPPOTrainer whose pipeline gains a stage
    recipes/NAME/src/verl_recipe_NAME/main.py      the entry point: one ``Recipe`` declaration (core's runner)
    recipes/NAME/tests/test_smoke.py               config + pipeline smoke test (fast, no Ray)

See CONTRIBUTING.md for what a recipe must show before it is merged.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")

PYPROJECT = """[project]
name = "{dist}"
version = "0.1.0"
description = "{title} on verl"
readme = "README.md"
requires-python = ">=3.11"
license = {{ text = "Apache-2.0" }}
# Inside the monorepo the workspace sources below pin these to the checked-out code and uv.lock pins
# the rest. Add what the recipe imports here (never in another package): its tests run in an environment
# of exactly these and the dev group (scripts/ci_matrix.py).
dependencies = [
    "verl-core[tracking]>=0.1,<0.2",
    "verl-workers>=0.1,<0.2",
    "verl-rewards>=0.1,<0.2",
    "omegaconf>=2.3",
]

[project.scripts]
{script} = "{module}.main:RECIPE.main"

[dependency-groups]
dev = ["pytest>=8", "pytest-timeout>=2.3"]

[tool.uv.sources]
verl-core = {{ workspace = true }}
verl-workers = {{ workspace = true }}
verl-rewards = {{ workspace = true }}

[build-system]
requires = ["hatchling>=1.25"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["src/{module}"]

[tool.hatch.build.targets.wheel.force-include]
"configs" = "{module}/configs"
"""

README = """# {title} ({dist})

<!-- The acceptance bar (CONTRIBUTING.md): fill in every TODO before the recipe is merged. -->

**Paper:** TODO title, authors, arXiv id / link. **Reported:** TODO the headline number (metric,
benchmark, model) and, if upstream verl has this recipe, the number it reports.

## What the recipe changes

TODO: each change of the paper and the hook it goes through (a stage of `{module}.trainer.Ray{cls}Trainer`'s
pipeline, registered losses / estimators, reward manager, or plain config). Everything else is core's
recipe runner (`{module}.main.RECIPE`).

## Run

    # CPU default (minutes, tiny model)
    uv run --package {dist} {script}
    # the paper's setting on GPUs
    uv run --package {dist} {script} --config recipes/{name}/configs/TODO.yaml key=value ...

## Expected numbers

| run | steps | minutes | reward before | reward after |
|---|---|---|---|---|
| CPU default (measured, TODO machine) | TODO | TODO | TODO | TODO |
| paper setting (TODO hardware) | TODO | TODO | - | TODO (paper: TODO) |

## Tests

    uv run --package {dist} pytest recipes/{name}/tests
"""

CPU_YAML = """# {title}, the CPU default:
#   uv run --package {dist} {script} [key=value ...]
# Merged over core's defaults (verl/trainer/config/ppo_trainer.yaml); key=value overrides win.
# Data and model left unset: the runner makes core's built-in addition task and a tiny Qwen2 warm-started
# on it under {{trainer.default_local_dir}}/assets (verl.trainer.demo), once.
data:
  train_files: null
  val_files: null
  train_batch_size: 8
  max_prompt_length: 32
  max_response_length: 8
actor_rollout_ref:
  model:
    path: null
  actor:
    ppo_mini_batch_size: 4
    ppo_micro_batch_size_per_gpu: 8
  rollout:
    name: hf
    n: 4
algorithm:
  adv_estimator: grpo
trainer:
  device: cpu
  nnodes: 1
  n_gpus_per_node: 1
  logger: [console, jsonl]
  project_name: {name}
  experiment_name: cpu
  default_local_dir: outputs/{name}_cpu
  total_training_steps: 20
"""

INIT = '''"""{title} as a verl recipe (see README.md)."""
'''

TRAINER = '''"""``Ray{cls}Trainer``: core's PPO-family pipeline with this recipe's change as a stage of its own.

Change only what the paper changes: insert, replace or wrap stages by name in ``build_pipeline``
(``verl.trainer.ppo.pipeline``; core's stages are ``gen, reward, filter, balance, old_log_prob, ref, values,
adv, update_critic, update_actor``, see ``verl.trainer.ppo.stages``), or override a ``stage_<name>``
method. New losses and estimators go through ``verl.trainer.ppo.core_algos.register_policy_loss`` /
``register_adv_est`` and are chosen in config. If a change needs a hook core lacks, add the hook to core
(small, documented), not a copy of the loop.
"""

from __future__ import annotations

from verl.protocol import DataProto
from verl.trainer.ppo.pipeline import Pipeline, Stage
from verl.trainer.ppo.ray_trainer import RayPPOTrainer


class Ray{cls}Trainer(RayPPOTrainer):
    def build_pipeline(self) -> Pipeline:
        return super().build_pipeline().insert_before("adv", Stage("{stage}", self.stage_{stage}))

    def stage_{stage}(self, batch: DataProto, metrics: dict) -> DataProto | None:
        # TODO: the recipe's change; the template keeps every trajectory.
        metrics["{stage}/trajectories"] = float(len(batch))
        return batch
'''

MAIN = '''"""``{script}``: core's recipe runner with this recipe's trainer (see ``verl.trainer.recipe_runner``).

    uv run --package {dist} {script} [key=value ...]            # the CPU default, configs/cpu.yaml
    uv run --package {dist} {script} --config FILE [key=value ...]
"""

from __future__ import annotations

from omegaconf import DictConfig

from verl.trainer.recipe_runner import BuiltIn, Recipe


def built_in(cfg: DictConfig, built: BuiltIn) -> list[str]:
    """Core's built-in addition task and a tiny Qwen2 warm-started on it, for unset data and model."""
    from verl.trainer.demo import asset_overrides

    return asset_overrides(cfg)


RECIPE = Recipe(
    name="{title}",
    module_file=__file__,
    cpu_configs=("cpu.yaml",),
    built_in=built_in,
    trainer_cls="{module}.trainer:Ray{cls}Trainer",
    summary=("val/*/reward",),
    prog="{script}",
    about=__doc__,
)

if __name__ == "__main__":
    RECIPE.main()
'''

SMOKE = '''"""Smoke test of the {name} recipe: its CPU config loads and validates, and its stage is in the pipeline.

TODO before merging (CONTRIBUTING.md): an end-to-end CPU run of the recipe (``RECIPE.train(argv)``,
``@pytest.mark.e2e``, ``@pytest.mark.slow``, under ~90 s), and unit tests of each change against
hand-derived values.
"""

import torch

from verl.protocol import DataProto
from {module}.main import RECIPE
from {module}.trainer import Ray{cls}Trainer


def test_cpu_config_loads_and_validates(tmp_path):
    from verl.utils.dataset import write_parquet
    from verl.utils.dataset.tasks import make_arithmetic_rows
    from verl.workers.tiny import build_tiny_qwen2

    train = write_parquet(make_arithmetic_rows(16, seed=0, digits=1), tmp_path / "train.parquet")
    build_tiny_qwen2(tmp_path / "model", size="xs")
    cfg = RECIPE.load_config([
        f"data.train_files={{train}}", f"actor_rollout_ref.model.path={{tmp_path / 'model'}}",
        "trainer.total_training_steps=1",
    ])
    assert cfg.trainer.device == "cpu" and cfg.trainer.total_training_steps == 1
    assert cfg.trainer.project_name == "{name}"


def test_the_command_line_has_help_and_exits_2_on_a_config_error(capsys):
    import pytest

    with pytest.raises(SystemExit) as ei:
        RECIPE.main(["--help"])
    assert ei.value.code == 0 and capsys.readouterr().out.startswith("usage: {script} ")
    with pytest.raises(SystemExit) as ei:
        RECIPE.main(["trainer.no_such_key=1"])
    assert ei.value.code == 2 and "unknown key 'trainer.no_such_key'" in capsys.readouterr().err


def test_the_recipes_stage_runs_before_the_advantage():
    trainer = Ray{cls}Trainer.__new__(Ray{cls}Trainer)  # no workers needed to build the pipeline
    trainer.config = RECIPE.load(RECIPE.with_default_config([]))
    names = trainer.pipeline.names
    assert names.index("{stage}") == names.index("adv") - 1
    batch = DataProto.from_dict(tensors={{"responses": torch.arange(6).reshape(3, 2)}})
    metrics = {{}}
    out = trainer.pipeline["{stage}"].run(batch, metrics)
    assert out.batch["responses"].tolist() == [[0, 1], [2, 3], [4, 5]] and metrics["{stage}/trajectories"] == 3.0
'''


def names(name: str) -> dict[str, str]:
    """The names derived from NAME: dist, module, console script, class stem."""
    if not NAME_RE.match(name):
        raise SystemExit(
            f"recipe name {name!r} is not valid: use lower-case letters and digits, words joined by - or _ "
            "(e.g. dapo, prime, my-paper)"
        )
    module = "verl_recipe_" + name.replace("-", "_")
    cls = "".join(part.capitalize() for part in re.split(r"[-_]", name))
    dashed = name.replace("_", "-")
    return {"name": name, "dist": f"verl-recipe-{dashed}", "module": module, "cls": cls, "script": f"verl-{dashed}",
            "stage": name.replace("-", "_")}


def create(name: str, dest: Path, title: str | None = None) -> Path:
    """Write the skeleton to ``dest/NAME``; refuses to touch an existing folder. Returns the folder."""
    n = names(name)
    n["title"] = title or name.upper()
    root = dest / name
    if root.exists():
        raise SystemExit(f"{root} already exists; choose another name or remove it first")
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        "configs/cpu.yaml": CPU_YAML,
        f"src/{n['module']}/__init__.py": INIT,
        f"src/{n['module']}/trainer.py": TRAINER,
        f"src/{n['module']}/main.py": MAIN,
        "tests/test_smoke.py": SMOKE,
    }
    for rel, template in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**n))
    return root


def _add_to_arrays(text: str, marker: re.Pattern[str], entry: str) -> tuple[str, int]:
    """Add ``entry`` (a quoted string) to every multi-line TOML array one of whose items matches
    ``marker``, after its last matching item; returns the text and how many such arrays hold it now."""
    lines = text.split("\n")
    out: list[str] = []
    changed = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        if line.rstrip().endswith("= [") or line.rstrip().endswith("=["):
            j = i + 1
            while j < len(lines) and lines[j].strip() != "]":
                j += 1
            items = lines[i + 1 : j]
            hits = [k for k, item in enumerate(items) if marker.search(item)]
            if hits and not any(entry + "," in item for item in items):
                last = items[hits[-1]]
                indent = last[: len(last) - len(last.lstrip())]
                items.insert(hits[-1] + 1, f"{indent}{entry},")
            changed += bool(hits)
            out.extend(items)
            i = j
            continue
        i += 1
    return "\n".join(out), changed


def wire(n: dict[str, str], workspace: Path = ROOT) -> None:
    """Add the recipe to the workspace root's pyproject: its source, the root dev group, and the
    import-linter contracts that list every recipe module."""
    path = workspace / "pyproject.toml"
    text = path.read_text()
    source = f"{n['dist']} = {{ workspace = true }}"
    if source not in text:
        sources = list(re.finditer(r"^verl-recipe-[a-z0-9-]+ = \{ workspace = true \}$", text, re.M))
        if not sources:
            raise SystemExit(f"{path}: no [tool.uv.sources] entry of another recipe to add {n['dist']} beside")
        end = sources[-1].end()
        text = text[:end] + "\n" + source + text[end:]
    text, dev = _add_to_arrays(text, re.compile(r'^\s*"verl-recipe-[a-z0-9-]+",'), f'"{n["dist"]}"')
    text, contracts = _add_to_arrays(text, re.compile(r'^\s*"verl_recipe_[a-z0-9_]+",'), f'"{n["module"]}"')
    if not dev or not contracts:
        raise SystemExit(f"{path}: found no dev group or import-linter list of recipes to add {n['dist']} to")
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help="recipe name, e.g. dapo or my-paper")
    ap.add_argument("--dest", type=Path, default=ROOT / "recipes", help="parent folder (default: recipes/)")
    ap.add_argument("--title", help="human name of the method, for the README and descriptions")
    ap.add_argument("--no-lock", action="store_true", help="do not run `uv lock` after wiring the workspace")
    args = ap.parse_args(argv)
    root = create(args.name, args.dest, args.title)
    n = names(args.name)
    workspace = args.dest.resolve().parent
    if args.dest.resolve() == (workspace / "recipes") and (workspace / "pyproject.toml").is_file():
        wire(n, workspace)
        print(f"added {n['dist']} to {workspace / 'pyproject.toml'}")
        if not args.no_lock:
            subprocess.run(["uv", "lock"], cwd=workspace, check=True)
    print(f"created {root}\nnext: uv run --frozen --package {n['dist']} pytest {root}/tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
