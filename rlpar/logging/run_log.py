"""The run's own log: console plus `<run_dir>/main.log`, and `events.jsonl` for what went wrong.

Hydra's job logging is off (conf/config.yaml): it would write into Hydra's output folder before
rlpar has validated the config or locked the run directory. A run attaches these handlers once
it holds its directory, and removes them when it ends.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from pathlib import Path

FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
FILE_ONLY = {"file_only": True}  # logging's `extra=` for a record meant for main.log alone (a compiler's output)


class _RunLogFile(logging.FileHandler):
    """main.log. Once a write fails (a full disk) it stops writing, where logging's default
    would print a traceback to the console for every record from then on."""

    failed = False

    def emit(self, record):
        if not self.failed:
            super().emit(record)

    def handleError(self, record):
        self.failed = True


class RunLog:
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self._handlers: list[logging.Handler] = []
        self._level = None

    def __enter__(self):
        root = logging.getLogger()
        console = logging.StreamHandler(sys.stdout)
        console.addFilter(lambda record: not getattr(record, "file_only", False))
        self._file = _RunLogFile(self.run_dir / "main.log")
        self._handlers = [console, self._file]
        for handler in self._handlers:
            handler.setFormatter(logging.Formatter(FORMAT))
            root.addHandler(handler)
        self._level = root.level
        root.setLevel(logging.INFO)
        return self

    def traceback_note(self, err: BaseException) -> str:
        """Writes the full traceback to main.log only (the console gets one line) and says where."""
        try:
            self._file.stream.write("".join(traceback.format_exception(err)))
            self._file.flush()
        except OSError as write_error:  # a full disk: the one line is all there is
            return f"no traceback kept: main.log cannot be written ({write_error.strerror or write_error})"
        return f"full traceback in {self.run_dir / 'main.log'}"

    def __exit__(self, *exc_info):
        root = logging.getLogger()
        for handler in self._handlers:
            root.removeHandler(handler)
            try:
                handler.close()
            except OSError:  # its last lines could not be flushed (a full disk); the run's own error says why
                pass
        if self._level is not None:
            root.setLevel(self._level)
        return False


def record_event(run_dir: str | Path, event: str, **fields) -> None:
    """Append one event (a skipped checkpoint, a recreated metrics file...) to events.jsonl."""
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "event": event, **fields}
    with open(Path(run_dir) / "events.jsonl", "a") as handle:
        handle.write(json.dumps(row) + "\n")
