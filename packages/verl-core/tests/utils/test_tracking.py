"""Tracking backends write real, readable files; console prints a compact line; the plot is a PNG."""

import glob
import json
import os

import pytest
from verl.utils.tracking import Tracking, format_console_line

STEPS = [(1, {"critic/score/mean": 0.25, "timing_s/gen": 1.5, "val/arith/reward": 0.1}),
         (2, {"critic/score/mean": 0.5, "timing_s/gen": 1.25}),
         (3, {"critic/score/mean": 0.75, "timing_s/gen": 1.0, "val/arith/reward": 0.6})]


def _log_all(t):
    for step, m in STEPS:
        t.log(m, step=step)
    t.finish()


def test_console_line_is_compact_and_complete(capsys):
    t = Tracking("p", "e", ["console"], output_dir=None)
    t.log({"a/b": 1 / 3, "n": 7, "s": "x"}, step=4)
    out = capsys.readouterr().out.strip()
    assert out == "step:4 - a/b:0.3333 - n:7 - s:x"
    assert format_console_line({}, 0) == "step:0"


def test_unknown_backend_names_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"'tensorbord'.*tensorboard"):
        Tracking("p", "e", ["tensorbord"], output_dir=str(tmp_path))


def test_jsonl_one_object_per_step_and_plot(tmp_path):
    t = Tracking("p", "e", ["jsonl"], output_dir=str(tmp_path))
    t.log(STEPS[1][1], step=2)  # no validation score: no plot yet
    assert not (tmp_path / "reward_curve.png").exists()
    t.log(STEPS[2][1], step=3)  # a validation step refreshes the plot while the run goes on
    assert (tmp_path / "reward_curve.png").exists()
    t.finish()
    (tmp_path / "metrics.jsonl").unlink()
    t = Tracking("p", "e", ["jsonl"], output_dir=str(tmp_path))
    _log_all(t)
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["critic/score/mean"] for r in rows] == [0.25, 0.5, 0.75]
    assert rows[2]["val/arith/reward"] == 0.6
    png = tmp_path / "reward_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert t.reward_history == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert t.val_history == {"val/arith/reward": [(1, 0.1), (3, 0.6)]}


def test_jsonl_writes_nan_as_string(tmp_path):
    t = Tracking("p", "e", ["jsonl"], output_dir=str(tmp_path))
    t.log({"x": float("nan"), "y": 2}, step=1)
    t.finish()
    row = json.loads(open(tmp_path / "metrics.jsonl").read())
    assert row == {"step": 1, "x": "nan", "y": 2.0}


def test_tensorboard_events_readable(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    t = Tracking("p", "e", ["tensorboard"], output_dir=str(tmp_path))
    _log_all(t)
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    events = acc.Scalars("critic/score/mean")
    assert [e.step for e in events] == [1, 2, 3]
    assert [e.value for e in events] == pytest.approx([0.25, 0.5, 0.75])
    assert [e.step for e in acc.Scalars("val/arith/reward")] == [1, 3]


def test_mlflow_file_store_readable(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    t = Tracking("proj", "exp", ["mlflow"], config={"a": {"b": 1}}, output_dir=str(tmp_path))
    run_id = t.loggers["mlflow"].run.info.run_id
    _log_all(t)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri="file:" + str(tmp_path / "mlruns"))
    hist = client.get_metric_history(run_id, "critic/score/mean")
    assert sorted((m.step, m.value) for m in hist) == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert client.get_run(run_id).data.params["a.b"] == "1"


def test_wandb_offline_writes_run_file(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    t = Tracking("proj", "exp", ["wandb"], config={"a": 1}, output_dir=str(tmp_path))
    _log_all(t)
    files = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1 and os.path.getsize(files[0]) > 0


def test_swanlab_offline_writes_run_file(tmp_path, monkeypatch):
    pytest.importorskip("swanlab")
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    t = Tracking("proj", "exp", ["swanlab"], config={"a": 1}, output_dir=str(tmp_path))
    _log_all(t)
    runs = glob.glob(str(tmp_path / "swanlog" / "run-*"))
    assert len(runs) == 1
    data = glob.glob(os.path.join(runs[0], "*.swanlab"))
    assert data and os.path.getsize(data[0]) > 0
    import yaml

    cfg = yaml.safe_load(open(os.path.join(runs[0], "files", "config.yaml")))
    assert cfg["a"]["value"] == 1, cfg


SAMPLES = [("1+2=", "3", 1.0), ("7*8=", "54\nno", 0.0)]


def test_generations_on_console_jsonl_and_tensorboard(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    t = Tracking("p", "e", ["console", "jsonl", "tensorboard"], output_dir=str(tmp_path))
    t.log_generations(SAMPLES, step=3)
    t.log_generations(SAMPLES[:1], step=6)
    t.finish()
    out = capsys.readouterr().out
    assert "validation generations (step 3):" in out
    assert "step  input  output  score\n3     1+2=   3       1\n3     7*8=   54\\nno  0" in out
    rows = [json.loads(line) for line in open(tmp_path / "val_generations.jsonl")]
    assert rows == [{"step": 3, "input": "1+2=", "output": "3", "score": 1.0},
                    {"step": 3, "input": "7*8=", "output": "54\nno", "score": 0.0},
                    {"step": 6, "input": "1+2=", "output": "3", "score": 1.0}]
    assert not (tmp_path / "metrics.jsonl").read_text()  # the metrics file keeps one row per step
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    events = acc.Tensors("val/generations/text_summary")
    assert [e.step for e in events] == [3, 6]
    text = events[0].tensor_proto.string_val[0].decode()
    assert text.splitlines()[0] == "| step | input | output | score |" and "| 3 | 7*8= | 54\\nno | 0 |" in text


def test_generations_in_mlflow_wandb_swanlab_offline(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    pytest.importorskip("swanlab")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    t = Tracking("proj", "exp", ["mlflow", "wandb", "swanlab"], output_dir=str(tmp_path))
    run_id = t.loggers["mlflow"].run.info.run_id
    t.log_generations(SAMPLES, step=2)
    t.finish()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri="file:" + str(tmp_path / "mlruns"))
    local = client.download_artifacts(run_id, "val_generations/step_2.json", str(tmp_path / "dl"))
    assert json.load(open(local)) == [{"input": i, "output": o, "score": s} for i, o, s in SAMPLES]
    # wandb offline: the table is a run file with every row
    tables = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "files" / "media" / "table" / "**" / "*.table.json"),
                       recursive=True)
    assert len(tables) == 1, tables
    table = json.load(open(tables[0]))
    assert table["columns"] == ["step", "input", "output", "score"]
    assert table["data"] == [[2, i, o, s] for i, o, s in SAMPLES]
    # swanlab offline: the run's records name the key; the table is a media file with every row
    data = glob.glob(str(tmp_path / "swanlog" / "run-*" / "*.swanlab"))
    assert data and b"val/generations" in open(data[0], "rb").read()
    (media,) = glob.glob(str(tmp_path / "swanlog" / "run-*" / "media" / "echarts" / "*.json"))
    rows = json.load(open(media))["rowData"]
    assert rows == [{"step": 2, "input": i, "output": o, "score": s} for i, o, s in SAMPLES]


def test_resumed_run_drops_rows_logged_after_its_checkpoint(tmp_path):
    """A run killed at step 5 with its last checkpoint at step 3 logged steps 4 and 5 (and a partial line);
    the resumed run trains them again: each must appear once."""
    t = Tracking("p", "e", default_backend=["jsonl"], output_dir=str(tmp_path))
    for step in range(6):
        t.log({"critic/score/mean": float(step)}, step=step)
    t.log_generations([("in", "out", 1.0)], step=4)
    t.finish()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "critic/sco')  # the kill came mid-write
    fresh = Tracking("p", "e", default_backend=["jsonl"], output_dir=str(tmp_path))  # no resume: keep rows
    fresh.finish()
    assert [json.loads(x)["step"] for x in open(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3, 4, 5]
    resumed = Tracking("p", "e", default_backend=["jsonl"], output_dir=str(tmp_path), resume_step=3)
    for step in (4, 5):
        resumed.log({"critic/score/mean": 10.0 + step}, step=step)
    resumed.finish()
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [(r["step"], r["critic/score/mean"]) for r in rows] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0),
                                                                      (4, 14.0), (5, 15.0)]
    assert (tmp_path / "val_generations.jsonl").read_text() == ""
