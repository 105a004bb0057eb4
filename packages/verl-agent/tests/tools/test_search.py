import asyncio
import json
import math

import pytest
from verl.agent.tools.search import BM25Index, SearchTool

DOCS = ["the cat sat", "the dog sat on the mat", "a bird"]


def test_bm25_scores_by_hand():
    idx = BM25Index(DOCS, k1=1.5, b=0.75)
    # Query "cat": only doc 0 has it. N=3, n=1 -> idf = ln((3-1+0.5)/(1+0.5)+1) = ln(8/3).
    avgdl = (3 + 6 + 2) / 3
    idf = math.log(2.5 / 1.5 + 1)
    want0 = idf * 1 * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * 3 / avgdl))
    got = idx.scores("cat")
    assert got[0] == pytest.approx(want0) and got[1] == 0.0 and got[2] == 0.0
    # "the": df=2, tf 1 in doc0 (len 3) and 2 in doc1 (len 6).
    idf_the = math.log((3 - 2 + 0.5) / (2 + 0.5) + 1)
    want1 = idf_the * 2 * 2.5 / (2 + 1.5 * (1 - 0.75 + 0.75 * 6 / avgdl))
    assert idx.scores("The!")[1] == pytest.approx(want1)
    assert [i for i, _ in idx.search("sat mat", top_k=2)] == [1, 0]


def test_search_tool_from_jsonl(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps({"id": i, "text": t}) for i, t in enumerate(DOCS)))
    tool = SearchTool({"corpus_path": str(corpus), "top_k": 1})
    response, reward, metrics = asyncio.run(tool.execute("i", {"query": "dog"}))
    assert response.text == "[1] the dog sat on the mat" and metrics == {"hits": 1.0}
    assert asyncio.run(tool.execute("i", {"query": "zebra"}))[0].text == "No results."
    assert asyncio.run(tool.execute("i", {}))[0].text.startswith("Error")


def test_search_tool_needs_a_corpus():
    with pytest.raises(ValueError, match="corpus_path"):
        SearchTool({})
