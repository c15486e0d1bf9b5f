"""The tool ``retrieval``: BM25 search over a local document collection.

The collection (:class:`~rlloom_agents.config.RetrievalToolConfig`'s ``corpus``) is read and indexed
once, when the tool is built: a JSONL file holds one ``{"id": str, "text": str}`` object per line; a
folder holds ``.txt`` files, each a passage whose id is its file name without ``.txt``. By default it
is the invented passages shipped with this package (:mod:`rlloom_agents.passages`). Words are
lower-cased runs of letters and digits, English stop words dropped, nothing stemmed.

Scoring is Okapi BM25 (:class:`BM25`), with k1 = 1.5 and b = 0.75: for a query's words q,
score(d) = Σ_q idf(q) · tf(q, d) · (k1 + 1) / (tf(q, d) + k1 · (1 − b + b · |d| / avgdl)), idf(q) =
ln(1 + (N − df(q) + 0.5) / (df(q) + 0.5)). It is written here, on numpy, rather than taken from
``bm25s``: that library imports numba (and llvmlite) whenever they are installed, and vLLM's CPU
worker, started later in the same process, fails while scanning llvmlite's objects.

Arguments ``{"query": str}``; the observation is the ``top_k`` best-scoring passages, best first, one
per line as ``[<id>] <text>`` — only passages sharing a word with the query (``no passage matches the
query`` when none does). A search runs on a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from rlloom.data import PromptRecord
from rlloom_agents.config import RetrievalToolConfig
from rlloom_agents.passages import SHIPPED


def load_corpus(path: str) -> list[tuple[str, str]]:
    """The ``(id, text)`` passages of a JSONL file or a folder of ``.txt`` files (module doc).
    FileNotFoundError naming ``path`` when it is missing or holds no passage; ValueError naming the
    file and line of a malformed one."""
    source = Path(path)
    if source.is_dir():
        found = [(file.stem, file.read_text(encoding="utf-8")) for file in sorted(source.glob("*.txt"))]
    elif source.is_file():
        found = [jsonl_passage(line, f"{path}:{number}") for number, line in
                 enumerate(source.read_text(encoding="utf-8").splitlines(), 1) if line.strip()]
    else:
        raise FileNotFoundError(f"retrieval corpus {path}: no such file or folder")
    if not found:
        raise FileNotFoundError(f"retrieval corpus {path}: holds no passage (a JSONL file of "
                                '{"id", "text"} objects, or a folder of .txt files)')
    return found


def jsonl_passage(line: str, where: str) -> tuple[str, str]:
    """One JSONL line's ``(id, text)``; ValueError naming ``where`` unless it is an object of two strings."""
    try:
        passage = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not JSON ({error.msg})") from None
    if not isinstance(passage, dict) or not all(isinstance(passage.get(key), str) for key in ("id", "text")):
        raise ValueError(f'{where}: a passage must be a JSON object with string "id" and "text"')
    return passage["id"], passage["text"]


STOP_WORDS = frozenset("""a an and are as at be but by for from had has have he her his in is it its of on or
she that the their them they this to was were which who will with what when where how do does did""".split())
WORD = re.compile(r"[a-z0-9]+")
K1, B = 1.5, 0.75


def words(text: str) -> list[str]:
    """The text's words as the index holds them (module doc)."""
    return [word for word in WORD.findall(text.lower()) if word not in STOP_WORDS]


class BM25:
    """An Okapi BM25 index over ``texts`` (the formula in the module doc): per word, the passages holding
    it and how often."""

    def __init__(self, texts: list[str]) -> None:
        counts = [Counter(words(text)) for text in texts]
        lengths = np.array([sum(count.values()) for count in counts], dtype=np.float64)
        self.size = len(texts)
        self.norm = K1 * (1 - B + B * lengths / max(lengths.mean(), 1e-9))
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for passage, count in enumerate(counts):
            for word, times in count.items():
                holders, frequencies = postings.setdefault(word, ([], []))
                holders.append(passage)
                frequencies.append(times)
        self.postings = {word: (np.array(holders), np.array(frequencies, dtype=np.float64))
                         for word, (holders, frequencies) in postings.items()}

    def scores(self, query: str) -> np.ndarray:
        """Every passage's score for ``query`` [N]."""
        total = np.zeros(self.size)
        for word in set(words(query)):
            if word in self.postings:
                holders, tf = self.postings[word]
                idf = math.log(1 + (self.size - len(holders) + 0.5) / (len(holders) + 0.5))
                total[holders] += idf * tf * (K1 + 1) / (tf + self.norm[holders])
        return total


class Retrieval:
    """The tool of the module doc (:class:`~rlloom.protocols.Tool`)."""

    name = "retrieval"
    description = "Search the document collection: the passages that best match the query, each with its id."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "words to look for"}},
        "required": ["query"],
    }

    def __init__(self, cfg: RetrievalToolConfig) -> None:
        self.passages = load_corpus(cfg.corpus or str(SHIPPED))
        self.top_k = min(cfg.top_k, len(self.passages))
        self.index = BM25([text for _, text in self.passages])

    def search(self, query: str) -> list[tuple[str, str]]:
        """The ``(id, text)`` of the best passages for ``query``, best first (ties: the earlier passage)."""
        scores = self.index.scores(query)
        best = np.argsort(-scores, kind="stable")[: self.top_k]
        return [self.passages[i] for i in best if scores[i] > 0]

    async def __call__(self, arguments: dict[str, Any], row: PromptRecord) -> str:
        hits = await asyncio.to_thread(self.search, arguments["query"])
        return "\n".join(f"[{id_}] {text}" for id_, text in hits) or "no passage matches the query"
