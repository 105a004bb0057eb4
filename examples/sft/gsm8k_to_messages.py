"""Turn GSM8K RL rows (from ``python -m verl.utils.preprocess.gsm8k``) into SFT chat rows.

    python examples/sft/gsm8k_to_messages.py --input ~/data/gsm8k/train.parquet --output ~/data/gsm8k_sft/train.parquet

Each output row is ``{"messages": [user: the RL prompt, assistant: the reference solution]}``; the
reference solution ends in ``#### <answer>``, the format the gsm8k scorer reads.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from verl.utils.dataset.rows import read_rows, write_parquet


def to_messages(rows: list[tuple[str, dict]]) -> list[dict]:
    out = []
    for where, row in rows:
        answer = (row.get("extra_info") or {}).get("answer")
        if not isinstance(answer, str):
            raise ValueError(f"{where}: extra_info.answer (the worked solution) is missing; "
                             f"make the input with python -m verl.utils.preprocess.gsm8k")
        out.append({"messages": list(row["prompt"]) + [{"role": "assistant", "content": answer}]})
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    args = p.parse_args(argv)
    rows = to_messages(read_rows(Path(args.input).expanduser()))
    path = write_parquet(rows, Path(args.output).expanduser())
    print(f"wrote {len(rows)} SFT rows to {path}")


if __name__ == "__main__":
    main()
