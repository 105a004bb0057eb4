"""A search tool over a local corpus with BM25 ranking (Robertson/Sparck Jones, k1 and b as usual).

The user gives the corpus: ``config.corpus_path`` (a JSONL file of ``{"id", "text"}`` objects, or a
text file with one document per line) or ``config.documents`` (a list of strings). ``top_k``
(default 3), ``k1`` (1.5), ``b`` (0.75).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from verl.agent.tools.base import BaseTool, ToolResponse
from verl.registries import TOOLS

_TOKEN_RE = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    return _TOKEN_RE.findall(text.lower())


class BM25Index:
    """Okapi BM25: score(q, d) = sum over query terms t of
    idf(t) * f(t, d) * (k1 + 1) / (f(t, d) + k1 * (1 - b + b * |d| / avgdl)),
    idf(t) = ln((N - n(t) + 0.5) / (n(t) + 0.5) + 1)."""

    def __init__(self, documents: list[str], k1: float = 1.5, b: float = 0.75):
        if not documents:
            raise ValueError("BM25Index needs at least one document")
        self.documents = list(documents)
        self.k1, self.b = k1, b
        self.term_freqs = [Counter(tokenize(d)) for d in self.documents]
        self.lengths = [sum(tf.values()) for tf in self.term_freqs]
        self.avgdl = sum(self.lengths) / len(self.lengths) or 1.0
        df: Counter = Counter()
        for tf in self.term_freqs:
            df.update(tf.keys())
        n = len(self.documents)
        self.idf = {t: math.log((n - c + 0.5) / (c + 0.5) + 1.0) for t, c in df.items()}

    def scores(self, query: str) -> list[float]:
        terms = tokenize(query)
        out = []
        for tf, length in zip(self.term_freqs, self.lengths):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / self.avgdl)
            for t in terms:
                f = tf.get(t, 0)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out

    def search(self, query: str, top_k: int = 3) -> list[tuple[int, float]]:
        """(document index, score) of the best ``top_k`` documents with a positive score."""
        ranked = sorted(enumerate(self.scores(query)), key=lambda x: (-x[1], x[0]))
        return [(i, s) for i, s in ranked[:top_k] if s > 0]


def load_corpus(path: str | Path) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"search corpus {path}: no such file")
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    if path.suffix == ".jsonl":
        docs = []
        for i, ln in enumerate(lines):
            row = json.loads(ln)
            if "text" not in row:
                raise ValueError(f"search corpus {path}, line {i + 1}: each JSON object needs a 'text' key")
            docs.append(row["text"])
        return docs
    return lines


@TOOLS.register("search")
class SearchTool(BaseTool):
    default_schema = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the knowledge base and return the most relevant passages.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "what to look for"}},
                "required": ["query"],
            },
        },
    }

    def __init__(self, config: dict[str, Any] | None = None, tool_schema: Any = None):
        super().__init__(config, tool_schema)
        if "documents" in self.config:
            docs = list(self.config["documents"])
        elif "corpus_path" in self.config:
            docs = load_corpus(self.config["corpus_path"])
        else:
            raise ValueError(
                "SearchTool config needs 'corpus_path' (JSONL or text file) or 'documents' (a list)"
            )
        self.index = BM25Index(
            docs, k1=float(self.config.get("k1", 1.5)), b=float(self.config.get("b", 0.75))
        )
        self.top_k = int(self.config.get("top_k", 3))

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        query = parameters.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolResponse(text="Error: search needs a non-empty string argument 'query'"), 0.0, {"tool_error": 1.0}
        hits = self.index.search(query, self.top_k)
        if not hits:
            return ToolResponse(text="No results."), 0.0, {"hits": 0.0}
        text = "\n".join(f"[{rank + 1}] {self.index.documents[i]}" for rank, (i, _) in enumerate(hits))
        return ToolResponse(text=text), 0.0, {"hits": float(len(hits))}
