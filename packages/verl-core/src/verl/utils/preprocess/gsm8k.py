"""GSM8K (``question``, ``answer`` ending in ``#### <number>``) -> RL rows with data_source ``openai/gsm8k``.

python -m verl.utils.preprocess.gsm8k --input gsm8k/train.jsonl --output_dir ~/data/gsm8k
"""

from __future__ import annotations

import re

from verl.utils.preprocess.common import require, run_cli

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_FINAL = re.compile(r"####\s*(-?[0-9.,]+)")


def extract_solution(answer: str) -> str | None:
    """The number after the last ``####``, commas removed; None when there is none."""
    found = _FINAL.findall(answer)
    return found[-1].replace(",", "").rstrip(".") if found else None


def convert(records: list[tuple[str, dict]], split: str) -> list[dict]:
    rows = []
    for i, (where, rec) in enumerate(records):
        question, answer = require(rec, "question", where), require(rec, "answer", where)
        solution = extract_solution(answer)
        if solution is None:
            raise ValueError(f"{where}: field 'answer' has no final '#### <number>': {answer[-80:]!r}")
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": solution},
                "extra_info": {"split": split, "index": i, "answer": answer, "question": question},
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    run_cli(__doc__.splitlines()[0], convert, argv)


if __name__ == "__main__":
    main()
