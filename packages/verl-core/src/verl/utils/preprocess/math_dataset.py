"""MATH-style problems (``problem``, ``solution`` with a final ``\\boxed{...}``) -> RL rows with
data_source ``DigitalLearningGmbH/MATH-lighteval``.

    python -m verl.utils.preprocess.math_dataset --input MATH/test --output_dir ~/data/math

The input is a json/jsonl/parquet file or a directory of per-problem json files (the original layout).
"""

from __future__ import annotations

from verl.utils.preprocess.common import require, run_cli

DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed x``), braces matched."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start:]
    if rest.startswith("\\boxed ") and not rest.startswith("\\boxed {"):
        return rest[len("\\boxed ") :].split("$")[0].strip()
    open_at = rest.find("{")
    if open_at < 0:
        return None
    depth = 0
    for j in range(open_at, len(rest)):
        if rest[j] == "{":
            depth += 1
        elif rest[j] == "}":
            depth -= 1
            if depth == 0:
                return rest[open_at + 1 : j]
    return None  # unbalanced braces


def convert(records: list[tuple[str, dict]], split: str) -> list[dict]:
    rows = []
    for i, (where, rec) in enumerate(records):
        problem, solution = require(rec, "problem", where), require(rec, "solution", where)
        answer = last_boxed(solution)
        if answer is None:
            raise ValueError(
                f"{where}: field 'solution' has no complete \\boxed{{...}} answer: {solution[-80:]!r}"
            )
        extra = {"split": split, "index": i}
        for key in ("level", "type"):
            if isinstance(rec.get(key), str):
                extra[key] = rec[key]
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": f"{problem} {INSTRUCTION}"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": extra,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    run_cli(__doc__.splitlines()[0], convert, argv)


if __name__ == "__main__":
    main()
