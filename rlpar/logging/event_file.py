"""A TensorBoard event file written from the caller's own thread.

torch's SummaryWriter hands each event to a writer thread, which computes the record's CRC-32C
in pure Python. That thread then wants the GIL while the sampler steps environments in the
main thread, which slows a local run's sampling (docs/benchmarks.md, "Throughput"). Here the
records go into memory when logged and reach the file every `flush_secs` and at `close`,
appended by path as TensorBoard's own writer does, so a failed write (a full disk) raises in
the call that flushed, not in a thread.
"""

from __future__ import annotations

import io
import itertools
import os
import socket
import time
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter

_FILE_NUMBERS = itertools.count()  # two files opened in one second by one process get two names


class EventFile:
    def __init__(self, log_dir: str | Path, *, flush_secs: float = 5.0):
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_NUMBERS)}"
        self.path = log_dir / name
        self.flush_secs = flush_secs
        self._pending = io.BytesIO()
        self._records = RecordWriter(self._pending)
        self._records.write(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        self.flush()

    def add_summary(self, summary: Summary, global_step: int | None = None) -> None:
        event = Event(wall_time=time.time(), summary=summary)
        if global_step is not None:
            event.step = int(global_step)
        self._records.write(event.SerializeToString())
        if time.monotonic() - self._flushed_at >= self.flush_secs:
            self.flush()

    def flush(self) -> None:
        """Append what was logged since the last flush (OSError where the file cannot take it)."""
        data = self._pending.getvalue()
        if data:
            with open(self.path, "ab") as file:
                file.write(data)
            self._pending.seek(0)
            self._pending.truncate()
        self._flushed_at = time.monotonic()

    def close(self) -> None:
        self.flush()
