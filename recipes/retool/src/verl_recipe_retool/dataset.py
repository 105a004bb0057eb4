"""ReTool's dataset step, as upstream's recipe has it (``recipe/retool/retool.py: CustomRLHFDataset``).

Every row read gets upstream's answer-format instruction appended to its first prompt message and
``agent_name="tool_agent"``; rows of the raw AIME files upstream names (a file under a
``Maxwell-Jia/AIME_2024`` or ``yentinglin/aime_2025`` directory, e.g. a local snapshot of the hub dataset)
are first turned into the row contract from their problem/answer columns, with ``data_source``
``aime_2024`` / ``aime_2025`` (which route to the DAPO math scorer).

With ``retool.answer_format=true`` (the default) the recipe points ``data.custom_cls`` at `ReToolDataset`
in this file; ``false`` reads the rows as they are.
"""

from __future__ import annotations

from pathlib import Path

from verl.utils.dataset.rl_dataset import RLHFDataset

ANSWER_FORMAT = "\nThe answer format must be: \\boxed{'The final answer goes here.'}"
# upstream's raw AIME datasets: (problem column, answer column)
AIME_FILES = {"Maxwell-Jia/AIME_2024": ("Problem", "Answer"), "yentinglin/aime_2025": ("problem", "answer")}


def with_answer_format(row: dict, prompt_key: str = "prompt") -> dict:
    """A copy of ``row`` with the instruction appended to its first prompt message and the tool agent set."""
    messages = [dict(m) for m in row[prompt_key]]
    messages[0]["content"] = messages[0]["content"] + ANSWER_FORMAT
    return {**row, prompt_key: messages, "agent_name": "tool_agent"}


def aime_source(data_file: str) -> str | None:
    """Which of upstream's raw AIME datasets ``data_file`` belongs to (by its directories), if any."""
    parts = Path(data_file).parts
    pairs = {"/".join(parts[i : i + 2]) for i in range(len(parts) - 1)}
    return next((name for name in AIME_FILES if name in pairs), None)


def from_aime(row: dict, source: str, data_file: str) -> dict:
    """A raw AIME row (problem and answer columns) as a row of the contract, instruction included."""
    problem_col, answer_col = AIME_FILES[source]
    missing = [c for c in (problem_col, answer_col) if c not in row]
    if missing:
        raise KeyError(
            f"{data_file}: a row of {source} needs the columns {problem_col!r} and {answer_col!r}; "
            f"missing {missing} (columns present: {sorted(row)})"
        )
    return {
        "data_source": source.split("/")[1].lower(),
        "prompt": [{"role": "user", "content": str(row[problem_col]) + ANSWER_FORMAT}],
        "ability": "MATH",
        "reward_model": {"ground_truth": str(row[answer_col])},
        "agent_name": "tool_agent",
    }


class ReToolDataset(RLHFDataset):
    """`RLHFDataset` with ReTool's row mapping (see the module doc)."""

    def map_row(self, row: dict, data_file: str) -> dict:
        source = aime_source(data_file)
        if source is not None and self.prompt_key not in row:
            return from_aime(row, source, data_file)
        if self.prompt_key not in row:  # the row contract's own error names the file and row
            return row
        return with_answer_format(row, self.prompt_key)
