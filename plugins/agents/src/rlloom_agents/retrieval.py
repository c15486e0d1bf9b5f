"""The tool ``retrieval``: BM25 search (``bm25s``) over a local document collection.

The collection (:class:`~rlloom_agents.config.RetrievalToolConfig`'s ``corpus``) is read and indexed
once, when the tool is built: a JSONL file holds one ``{"id": str, "text": str}`` object per line; a
folder holds ``.txt`` files, each a passage whose id is its file name without ``.txt``. By default it
is the invented passages shipped with this package (:mod:`rlloom_agents.passages`). Words are
lower-cased, English stop words dropped, nothing stemmed.

Arguments ``{"query": str}``; the observation is the ``top_k`` best-scoring passages, best first, one
per line as ``[<id>] <text>`` — only passages sharing a word with the query (``no passage matches the
query`` when none does). A search runs on a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import bm25s

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


def words(texts: list[str]) -> list[list[str]]:
    """Each text's words as the index holds them (module doc)."""
    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


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
        self.index = bm25s.BM25()
        self.index.index(words([text for _, text in self.passages]), show_progress=False)

    def search(self, query: str) -> list[tuple[str, str]]:
        """The ``(id, text)`` of the best passages for ``query``, best first (module doc)."""
        found = self.index.retrieve(words([query]), k=self.top_k, show_progress=False)
        return [self.passages[i] for i, score in zip(found.documents[0], found.scores[0]) if score > 0]

    async def __call__(self, arguments: dict[str, Any], row: PromptRecord) -> str:
        hits = await asyncio.to_thread(self.search, arguments["query"])
        return "\n".join(f"[{id_}] {text}" for id_, text in hits) or "no passage matches the query"
