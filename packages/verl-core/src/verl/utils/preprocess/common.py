"""Shared input/output for the preprocessing scripts."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from verl.utils.dataset.rows import read_rows, write_parquet


def input_records(path: str | Path) -> list[tuple[str, dict]]:
    """``[(where, record)]`` from a parquet/jsonl/json file, or every ``*.json`` under a directory."""
    path = Path(path).expanduser()
    if path.is_dir():
        files = sorted(path.rglob("*.json")) + sorted(path.rglob("*.jsonl")) + sorted(path.rglob("*.parquet"))
        if not files:
            raise FileNotFoundError(f"{path}: no .json, .jsonl or .parquet files in this directory")
        return [(f"{f}: {label}", rec) for f in files for label, rec in read_rows(f)]
    return [(f"{path}: {label}", rec) for label, rec in read_rows(path)]


def guess_split(path: str | Path) -> str:
    """``test`` when the file or directory name says so, else ``train``."""
    return "test" if "test" in Path(path).name.lower() else "train"


def require(record: dict, field: str, where: str) -> str:
    if field not in record or not isinstance(record[field], str):
        got = "missing" if field not in record else f"a {type(record[field]).__name__}"
        raise ValueError(f"{where}: field {field!r} must be a string, but it is {got}")
    return record[field]


def run_cli(
    description: str, convert: Callable[[list[tuple[str, dict]], str], list[dict]], argv=None
) -> None:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--input", action="append", required=True, help="local file or directory; repeat for several"
    )
    p.add_argument("--output_dir", required=True, help="writes <split>.parquet here")
    p.add_argument("--split", default=None, help="split name (default: 'test' if the input name contains it)")
    args = p.parse_args(argv)
    for inp in args.input:
        split = args.split or guess_split(inp)
        rows = convert(input_records(inp), split)
        out = write_parquet(rows, Path(args.output_dir).expanduser() / f"{split}.parquet")
        print(f"wrote {len(rows)} rows ({split}) from {inp} to {out}")
