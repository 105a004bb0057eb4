"""The RL row contract, without torch: reading rows from parquet/jsonl/json, checking them, writing parquet.

Row contract: ``data_source`` (str), ``prompt`` (list of chat messages ``{"role", "content"}``),
``reward_model`` (dict with ``ground_truth``, unless ``style == "model"``), optional ``ability``,
``extra_info`` (dict), ``agent_name``, ``tools_kwargs``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class DatasetRowError(ValueError):
    """A row that does not follow the row contract; the message names the file, the row and the field."""


# ------------------------------------------------------------------------------------------ reading
def read_rows(path: str | Path) -> list[tuple[str, dict]]:
    """Read a parquet, jsonl or json file into ``[(position label, row dict)]``.

    The label ("row 3" for parquet/json lists, 0-based; "line 4" for jsonl, 1-based) is used in errors.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return [(f"row {i}", r) for i, r in enumerate(pq.read_table(path).to_pylist())]
    if suffix == ".jsonl":
        out = []
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DatasetRowError(f"{path}: line {lineno}: not valid JSON ({e.msg})") from e
                out.append((f"line {lineno}", row))
        return out
    if suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            data = [data]
        return [(f"row {i}", r) for i, r in enumerate(data)]
    raise ValueError(f"data file {path}: unsupported extension {suffix!r}; use .parquet, .jsonl or .json")


def as_file_list(files: str | Path | Sequence[str | Path]) -> list[str]:
    if isinstance(files, str | Path):
        return [str(files)]
    return [str(f) for f in files]


def check_row(row: Any, where: str, prompt_key: str = "prompt") -> dict:
    """Return ``row`` as a dict if it follows the row contract, else raise `DatasetRowError` naming the field."""
    if not isinstance(row, Mapping):
        raise DatasetRowError(f"{where}: a row must be a mapping of fields, got {type(row).__name__}")
    row = dict(row)

    def bad(field: str, why: str) -> DatasetRowError:
        return DatasetRowError(f"{where}: field {field!r} {why}")

    if "data_source" not in row:
        raise bad("data_source", "is missing (the name that picks the scorer, e.g. 'openai/gsm8k')")
    if not isinstance(row["data_source"], str):
        raise bad("data_source", f"must be a string, got {type(row['data_source']).__name__}")
    if prompt_key not in row:
        raise bad(prompt_key, "is missing (a list of chat messages: [{'role': 'user', 'content': '...'}])")
    messages = row[prompt_key]
    if not isinstance(messages, list) or not messages:
        raise bad(
            prompt_key,
            f"must be a non-empty list of chat messages, got {type(messages).__name__}: {messages!r:.80}",
        )
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or "content" not in m:
            raise bad(
                f"{prompt_key}[{i}]", f"must be a message {{'role': str, 'content': str}}, got {m!r:.80}"
            )
        if not isinstance(m["content"], str | list):
            raise bad(f"{prompt_key}[{i}].content", f"must be a string, got {type(m['content']).__name__}")
    if all(isinstance(m["content"], str) and not m["content"].strip() for m in messages):
        raise bad(prompt_key, f"holds only empty messages: {messages!r:.80}; every prompt needs some text")
    rm = row.get("reward_model")
    if not isinstance(rm, Mapping):
        raise bad("reward_model", f"must be a dict with 'ground_truth' (and 'style'), got {rm!r:.80}")
    if rm.get("style", "rule") != "model" and "ground_truth" not in rm:
        raise bad(
            "reward_model.ground_truth", "is missing (the answer the rule-based scorer compares against)"
        )
    extra = row.get("extra_info")
    if extra is not None and not isinstance(extra, Mapping):
        raise bad("extra_info", f"must be a dict, got {type(extra).__name__}")
    return row


def write_parquet(rows: list[dict], path: str | Path) -> Path:
    """Write rows with pyarrow (creating the directory). When the ``extra_info.metadata`` dicts have no
    common Arrow type (tasks whose metadata varies by row), they are stored as JSON strings instead."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        table = pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        table = pa.Table.from_pylist([_metadata_as_json(r) for r in rows])
    pq.write_table(table, path)
    return path


def _metadata_as_json(row: dict) -> dict:
    extra = dict(row.get("extra_info") or {})
    if "metadata" in extra and not isinstance(extra["metadata"], str):
        extra["metadata"] = json.dumps(extra["metadata"])
    return {**row, "extra_info": extra}
