"""Dynamic batching by a token budget: many requests' sequences through one forward pass.

Each request becomes a `Job` of one or more sequences (`Row`s: a text, a query-passage pair, a
question window). Rows wait in one queue; a single worker thread takes the next batch, runs it
through the model off the event loop, and hands each row's output back to its job; a job's
future is resolved on the event loop once all its rows are done.

`take_batch` is the whole policy, a pure function: the oldest waiting row always goes in (no
row starves), then the rows closest to it in length, as long as the padded batch (longest row x
rows) stays within `max_tokens` and `max_size`. Grouping by length keeps padding small; a row
longer than the budget on its own still runs, alone. Only rows for the same model and operation
share a batch, and only the first `WINDOW` waiting rows are looked at, so one batch costs little
however long the queue is.

A request whose client went away is cancelled (`Batcher.cancel`): its rows still waiting leave the
queue before any batch is taken, so they never reach the model (text-embeddings-inference drops
such entries the same way); rows already in a running batch finish and their outputs are dropped.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

WINDOW = 4096  # waiting rows a batch is chosen from


def take_batch(lengths: Sequence[int], max_tokens: int, max_size: int) -> list[int]:
    """Indices (into `lengths`, oldest first) of the next batch, shortest row first.

    The oldest row is always chosen; then rows by closeness of length to it (ties: the older
    first), each added when the batch still fits: longest row x rows <= max_tokens and
    rows <= max_size. A row that does not fit is skipped, and a shorter one further on may.
    """
    if not lengths:
        return []
    first = lengths[0]
    order = sorted(range(len(lengths)), key=lambda i: (abs(lengths[i] - first), i))
    chosen, longest = [order[0]], lengths[order[0]]
    for i in order[1:]:
        if len(chosen) >= max_size:
            break
        wider = max(longest, lengths[i])
        if wider * (len(chosen) + 1) <= max_tokens:
            chosen.append(i)
            longest = wider
    return sorted(chosen, key=lambda i: (lengths[i], i))


class Job:
    """One request's rows; `future` (on the event loop) gets the list of row outputs, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, n_rows: int):
        self.loop = loop
        self.future: asyncio.Future = loop.create_future()
        self.outputs: list = [None] * n_rows
        self.left = n_rows
        self.failed = False

    def row_done(self, index: int, output) -> None:  # worker thread only
        self.outputs[index] = output
        self.left -= 1
        if self.left == 0 and not self.failed:
            self.loop.call_soon_threadsafe(_settle, self.future, self.outputs, None)

    def fail(self, error: BaseException) -> None:  # worker thread only
        if not self.failed:
            self.failed = True
            self.loop.call_soon_threadsafe(_settle, self.future, None, error)


def _settle(future: asyncio.Future, result, error) -> None:
    if future.done():  # the client went away and its job was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


@dataclass
class Row:
    key: tuple[str, str]  # (model name, operation): only equal keys share a batch
    ids: list[int]
    type_ids: list[int]
    job: Job
    index: int  # this row's place in its job's outputs

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class BatchStats:
    rows: int
    tokens: int  # real tokens
    padded_tokens: int  # longest row x rows: what the forward pass computes
    seconds: float


class Batcher:
    """The queue of rows and the one worker thread that runs them, batch by batch.

    `run(key, rows)` returns one output per row (it runs on the worker thread); `on_batch`, when
    given, is called with each batch's `BatchStats` after it ran. `close()` lets the worker finish
    every row already queued, then stops it.
    """

    def __init__(self, run: Callable[[tuple[str, str], list[Row]], list], max_tokens: int, max_size: int,
                 on_batch: Callable[[BatchStats], None] | None = None):
        self.run, self.max_tokens, self.max_size, self.on_batch = run, max_tokens, max_size, on_batch
        self._pending: list[Row] = []
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._work, name="bertkit-serve-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, rows: list[Row]) -> None:
        with self._cond:
            self._pending.extend(rows)
            self._cond.notify()

    def cancel(self, job: Job) -> int:
        """Drop `job`'s rows that are still waiting (its client went away); how many were dropped."""
        with self._cond:
            kept = [row for row in self._pending if row.job is not job]
            dropped = len(self._pending) - len(kept)
            self._pending = kept
        return dropped

    @property
    def waiting(self) -> int:
        """Rows queued and not yet in a batch."""
        return len(self._pending)

    def close(self, timeout: float | None = None) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _next(self) -> list[Row]:
        """Remove and return the next batch (the caller holds the lock; rows are waiting)."""
        key = self._pending[0].key
        window = self._pending[:WINDOW]
        candidates = [i for i, row in enumerate(window) if row.key == key]
        picked = [candidates[j] for j in take_batch([len(window[i]) for i in candidates], self.max_tokens,
                                                    self.max_size)]
        taken = set(picked)
        batch = [window[i] for i in picked]
        self._pending = [row for i, row in enumerate(self._pending) if i not in taken]
        return batch

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return
                batch = self._next()
            start = time.perf_counter()
            try:
                outputs = self.run(batch[0].key, batch)
            except Exception as e:  # one bad batch fails its own jobs, and the server goes on
                for row in batch:
                    row.job.fail(e)
                continue
            for row, output in zip(batch, outputs):
                row.job.row_done(row.index, output)
            if self.on_batch is not None:
                longest = max(len(row) for row in batch)
                self.on_batch(BatchStats(len(batch), sum(len(row) for row in batch), longest * len(batch),
                                         time.perf_counter() - start))
