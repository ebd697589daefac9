"""Ctrl-C and SIGTERM held until a safe point, so a stop never leaves half-done state behind."""

from __future__ import annotations

import signal
import sys
import threading


class HeldInterrupts:
    """Within the block, SIGINT and SIGTERM only set `requested` (and print `message` once);
    the caller stops at its next safe point. With `second_stops_at_once`, a second signal raises
    KeyboardInterrupt at once and sets `forced`. Their handlers are put back at the end.

    Takes over only signals whose handler is Python code (Python's Ctrl-C, main.py's SIGTERM),
    and only on the main thread, where signals are handled."""

    def __init__(self, message: str, *, second_stops_at_once: bool = False):
        self.message = message
        self.second_stops_at_once = second_stops_at_once
        self.requested = False
        self.forced = False
        self._previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                if callable(signal.getsignal(sig)):
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:
            if self.second_stops_at_once:
                self.forced = True
                raise KeyboardInterrupt
            return
        self.requested = True
        print(self.message, file=sys.stderr, flush=True)

    def __exit__(self, *exc_info):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        return False
