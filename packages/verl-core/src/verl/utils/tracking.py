"""Experiment tracking: one ``Tracking`` object fans a step's metrics out to the chosen backends.

Backends (``trainer.logger``): ``console`` (one compact line per step), ``jsonl`` (one JSON object per
step in ``{output_dir}/metrics.jsonl``), ``tensorboard`` (event files in ``{output_dir}/tensorboard``),
``wandb`` (offline mode unless ``WANDB_MODE`` says otherwise), ``swanlab`` (offline mode with a local
log dir unless ``SWANLAB_MODE`` says otherwise) and ``mlflow`` (a ``file:`` store under ``output_dir``
unless ``MLFLOW_TRACKING_URI`` is set). The heavy ones are imported only when chosen.

``Tracking`` also keeps the history of the reward and validation scores, and of the verdict shares
reward managers report (``reward/verdict/<kind>``: why samples got their score), so ``finish()`` (and
``plot()``) can write a PNG of the reward curve, with the shares in a panel below, next to the run.

``log_generations(samples, step)`` records validation samples ``(input, output, score)``
(``trainer.log_val_generations``) as each backend can: a text table on the console, rows in
``{output_dir}/val_generations.jsonl``, a markdown table as TensorBoard text (``val/generations``), a
``wandb.Table`` and a SwanLab ECharts table under ``val/generations``, a JSON artifact in MLflow.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

BACKENDS = ("console", "jsonl", "tensorboard", "wandb", "swanlab", "mlflow")
GENERATIONS_KEY = "val/generations"
#: a validation sample as the trackers get it: (prompt text, response text, score)
Sample = tuple[str, str, float]

# Metric keys the reward plot follows: the training score (first match wins) and validation rewards.
TRAIN_REWARD_KEYS = ("critic/score/mean", "critic/rewards/mean", "reward/mean")
VAL_REWARD_PREFIX = "val/"
VAL_REWARD_SUFFIX = "/reward"
SHARE_PREFIX = "reward/verdict/"  # the share of scored samples per verdict (verl-rewards' managers)


def _to_number(v: Any) -> float | None:
    """A metric value as a float, or None if it is not a scalar (lists, strings are skipped)."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float):
        return float(v)
    item = getattr(v, "item", None)  # torch / numpy scalars
    if item is not None and getattr(v, "ndim", 1) == 0:
        return float(item())
    return None


def scalar_metrics(data: Mapping[str, Any]) -> dict[str, float]:
    """Keep only the scalar entries of a metrics dict, converted to float."""
    out = {}
    for k, v in data.items():
        x = _to_number(v)
        if x is not None:
            out[k] = x
    return out


def generations_table(samples: list[Sample], step: int, markdown: bool = False) -> str:
    """The samples as a text table (one row each; newlines shown as ``\\n`` so rows stay rows)."""
    rows = [(str(step), _one_line(i), _one_line(o), f"{float(s):.4g}") for i, o, s in samples]
    head = ("step", "input", "output", "score")
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows])
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows])


def _one_line(text: str) -> str:
    return str(text).replace("\n", "\\n")


def format_console_line(data: Mapping[str, Any], step: int) -> str:
    """``step:3 - critic/score/mean:0.5 - ...`` with floats shortened to 4 significant digits."""
    parts = [f"step:{step}"]
    for k, v in data.items():
        x = _to_number(v)
        parts.append(f"{k}:{x:.4g}" if x is not None else f"{k}:{v}")
    return " - ".join(parts)


class _Console:
    def __init__(self, stream=None):
        self.stream = stream

    def log(self, data: dict, step: int) -> None:
        line = format_console_line(data, step)
        # tqdm.write keeps a live progress bar intact; it falls back to print semantics.
        from tqdm import tqdm

        tqdm.write(line, file=self.stream or sys.stdout)

    def log_generations(self, samples: list[Sample], step: int) -> None:
        from tqdm import tqdm

        tqdm.write(f"validation generations (step {step}):\n{generations_table(samples, step)}",
                   file=self.stream or sys.stdout)

    def finish(self) -> None:
        pass


def _keep_rows_through(path: str, resume_step: int | None) -> None:
    """Rewrite the JSON-lines file ``path`` without the rows a resumed run will log again.

    A run killed after logging steps past its last checkpoint would otherwise count those steps twice
    when it resumes; rows with ``step > resume_step`` go (``None``: a fresh run, all rows stay). A last
    line cut short by a kill mid-write goes too. Atomic: the old file or the new one, never a mix.
    """
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines.pop()  # cut short by a kill mid-write
    if resume_step is not None:
        lines = [line for line in lines if not line.strip() or json.loads(line).get("step", 0) <= resume_step]
    if "".join(lines) == text:
        return
    # imported here: the checkpoint package loads torch, which importing the tracker does not need
    from verl.utils.checkpoint.checkpoint_manager import atomic_write_text

    atomic_write_text(path, "".join(lines))


class _Jsonl:
    def __init__(self, path: str, resume_step: int | None = None):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        _keep_rows_through(path, resume_step)
        _keep_rows_through(os.path.join(os.path.dirname(path), "val_generations.jsonl"), resume_step)
        self._f = open(path, "a", encoding="utf-8")  # append: a resumed run continues the same file

    def log(self, data: dict, step: int) -> None:
        row: dict[str, Any] = {"step": step, **scalar_metrics(data)}
        # NaN/inf are not valid JSON; write them as strings so the line stays parseable.
        row = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in row.items()}
        self._f.write(json.dumps(row) + "\n")
        self._f.flush()

    def log_generations(self, samples: list[Sample], step: int) -> None:
        path = os.path.join(os.path.dirname(self.path), "val_generations.jsonl")
        with open(path, "a", encoding="utf-8") as f:
            for i, o, s in samples:
                f.write(json.dumps({"step": step, "input": i, "output": o, "score": float(s)}, ensure_ascii=False) + "\n")

    def finish(self) -> None:
        self._f.close()


class _TensorBoard:
    def __init__(self, log_dir: str, resume_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = log_dir
        # purge_step: TensorBoard hides the events a killed run wrote past the checkpoint it resumes from
        purge = None if resume_step is None else resume_step + 1
        self.writer = SummaryWriter(log_dir=log_dir, purge_step=purge)

    def log(self, data: dict, step: int) -> None:
        for k, v in scalar_metrics(data).items():
            self.writer.add_scalar(k, v, global_step=step)
        self.writer.flush()

    def log_generations(self, samples: list[Sample], step: int) -> None:
        self.writer.add_text(GENERATIONS_KEY, generations_table(samples, step, markdown=True), global_step=step)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()


class _Wandb:
    def __init__(self, project: str, name: str, config: dict | None, out_dir: str):
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        mode: Any = os.environ.get("WANDB_MODE", "offline")  # never reach for the network unless asked; wandb checks it
        os.makedirs(out_dir, exist_ok=True)
        self.run = wandb.init(project=project, name=name, config=config, mode=mode, dir=out_dir)
        self._wandb = wandb
        self._rows: list[list] = []  # one table grows over the run, as upstream logs it

    def log(self, data: dict, step: int) -> None:
        self.run.log(scalar_metrics(data), step=step)

    def log_generations(self, samples: list[Sample], step: int) -> None:
        self._rows += [[step, i, o, float(s)] for i, o, s in samples]
        table = self._wandb.Table(columns=["step", "input", "output", "score"], data=list(self._rows))
        self.run.log({GENERATIONS_KEY: table}, step=step)

    def finish(self) -> None:
        self.run.finish()


class _SwanLab:
    def __init__(self, project: str, name: str, config: dict | None, out_dir: str):
        import swanlab

        mode = os.environ.get("SWANLAB_MODE", "offline")
        os.makedirs(out_dir, exist_ok=True)
        self._swanlab = swanlab
        self.run = swanlab.init(project=project, name=name, config=config, mode=mode, log_dir=out_dir)

    def log(self, data: dict, step: int) -> None:
        self._swanlab.log(scalar_metrics(data), step=step)

    def log_generations(self, samples: list[Sample], step: int) -> None:
        table = self._swanlab.echarts.Table()
        table.add(headers=["step", "input", "output", "score"], rows=[[step, i, o, float(s)] for i, o, s in samples])
        self._swanlab.log({GENERATIONS_KEY: table}, step=step)

    def finish(self) -> None:
        self._swanlab.finish()


class _MLflow:
    def __init__(self, project: str, name: str, config: dict | None, out_dir: str):
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            # A local file store needs no server. MLflow 3 keeps the file store behind an opt-in.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = "file:" + os.path.abspath(out_dir)
        import mlflow

        self._mlflow = mlflow
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(project)
        self.run = mlflow.start_run(run_name=name)
        if config:
            flat = _flatten(config)
            # mlflow limits param values to 6000 chars; long values are cut, not rejected.
            mlflow.log_params({k: str(v)[:6000] for k, v in flat.items()})

    def log(self, data: dict, step: int) -> None:
        # mlflow rejects '@' in metric names (e.g. "pass@k").
        metrics = {k.replace("@", "_at_"): v for k, v in scalar_metrics(data).items()}
        self._mlflow.log_metrics(metrics, step=step)

    def log_generations(self, samples: list[Sample], step: int) -> None:
        rows = [{"input": i, "output": o, "score": float(s)} for i, o, s in samples]
        self._mlflow.log_dict(rows, f"val_generations/step_{step}.json")  # type: ignore[arg-type]  # any JSON value

    def finish(self) -> None:
        self._mlflow.end_run()


def _flatten(d: Mapping, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _plain_config(config: Any) -> dict | None:
    """An OmegaConf config (or dict) as a plain dict for the trackers; None stays None."""
    if config is None:
        return None
    if isinstance(config, Mapping) and not type(config).__module__.startswith("omegaconf"):
        return dict(config)
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(config, resolve=True)
    if not isinstance(plain, dict):
        raise TypeError(f"the run config must be a mapping, got {type(plain).__name__}")
    return plain


class Tracking:
    """Fan out ``log(data, step)`` to every backend in ``default_backend``.

    Args:
        project_name, experiment_name: run identity (used by wandb/swanlab/mlflow).
        default_backend: a list of backend names (or one name); see ``BACKENDS``.
        config: the run config (dict or OmegaConf), recorded by the backends that store one.
        output_dir: where file-based backends write; default ``outputs/{project}/{experiment}``.
        resume_step: the checkpoint step a resumed run continues from: ``metrics.jsonl`` (and TensorBoard)
            drop what was logged after it, so no step is counted twice. None for a fresh run.
    """

    def __init__(
        self,
        project_name: str,
        experiment_name: str,
        default_backend: str | Iterable[str] = "console",
        config: Any = None,
        output_dir: str | None = None,
        resume_step: int | None = None,
    ):
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend)
        unknown = [b for b in backends if b not in BACKENDS]
        if unknown:
            raise ValueError(f"unknown tracking backend(s) {unknown} in trainer.logger; known: {list(BACKENDS)}")
        self.project_name = project_name
        self.experiment_name = experiment_name
        self.output_dir = output_dir or os.path.join("outputs", project_name, experiment_name)
        os.makedirs(self.output_dir, exist_ok=True)
        plain = _plain_config(config)
        self.resume_step = resume_step
        self.loggers: dict[str, Any] = {}
        for b in dict.fromkeys(backends):  # keep order, drop duplicates
            self.loggers[b] = self._make(b, plain)
        # History for the plot: step -> train reward, and per validation key step -> value.
        self.reward_history: list[tuple[int, float]] = []
        self.val_history: dict[str, list[tuple[int, float]]] = {}
        self.share_history: dict[str, list[tuple[int, float]]] = {}
        self._finished = False
        self._plot_notice_given = False

    def _make(self, backend: str, config: dict | None):
        if backend == "console":
            return _Console()
        if backend == "jsonl":
            return _Jsonl(os.path.join(self.output_dir, "metrics.jsonl"), self.resume_step)
        if backend == "tensorboard":
            log_dir = os.environ.get("TENSORBOARD_DIR") or os.path.join(self.output_dir, "tensorboard")
            return _TensorBoard(log_dir, self.resume_step)
        if backend == "wandb":
            return _Wandb(self.project_name, self.experiment_name, config, self.output_dir)
        if backend == "swanlab":
            return _SwanLab(self.project_name, self.experiment_name, config, os.path.join(self.output_dir, "swanlog"))
        if backend == "mlflow":
            return _MLflow(self.project_name, self.experiment_name, config, os.path.join(self.output_dir, "mlruns"))
        raise AssertionError(backend)  # unreachable: names were checked in __init__

    def log(self, data: Mapping[str, Any], step: int) -> None:
        """Send one step's metrics to every backend and record the reward/val history."""
        data = dict(data)
        for k in TRAIN_REWARD_KEYS:
            x = _to_number(data.get(k))
            if x is not None:
                self.reward_history.append((step, x))
                break
        new_val = False
        for k, v in data.items():
            if k.startswith(VAL_REWARD_PREFIX) and k.endswith(VAL_REWARD_SUFFIX):
                x = _to_number(v)
                if x is not None:
                    self.val_history.setdefault(k, []).append((step, x))
                    new_val = True
            elif k.startswith(SHARE_PREFIX):
                x = _to_number(v)
                if x is not None:
                    self.share_history.setdefault(k, []).append((step, x))
        for logger in self.loggers.values():
            logger.log(data, step)
        if new_val and self.reward_history:
            self.plot()  # refresh the curve at each validation so a running job can be watched

    def log_generations(self, samples: list[Sample], step: int) -> None:
        """Send validation samples ``(input, output, score)`` to every backend (see the module doc)."""
        for logger in self.loggers.values():
            logger.log_generations(samples, step)

    def plot(self, path: str | None = None) -> str | None:
        """Write the reward curve (and validation scores) as a PNG; returns its path, or None if no data."""
        if not self.reward_history and not self.val_history and not self.share_history:
            return None
        from verl.utils.plotting import PLOT_INSTALL, plot_available, plot_reward_curve

        if not plot_available():
            if not self._plot_notice_given:
                self._plot_notice_given = True
                print(f"note: no reward plot: matplotlib is not installed ({PLOT_INSTALL})", file=sys.stderr)
            return None

        path = path or os.path.join(self.output_dir, "reward_curve.png")
        plot_reward_curve(self.reward_history, self.val_history, path,
                          title=f"{self.project_name}/{self.experiment_name}", shares=self.share_history)
        return path

    def finish(self) -> None:
        """Write the plot and close every backend (idempotent)."""
        if self._finished:
            return
        self._finished = True
        self.plot()
        for logger in self.loggers.values():
            logger.finish()
