"""Ctrl-C and SIGTERM: held until a safe point, and never cutting a stop's clean-up short.

main.py answers signals in three phases (`exit_at_once_on_signals`, then `stop_on_signals`):
- start-up, before anything that needs cleaning up exists: exit 130 at once;
- the run: the first signal stops it (KeyboardInterrupt, or, inside a `HeldInterrupts` block,
  at the block's next safe point); a second one inside such a block stops at once;
  until the stop is under way, each signal raises KeyboardInterrupt again;
- once a stop is under way: signals are only noted, so the clean-up (final checkpoint, Ray's
  shutdown, the sweep of Ray's processes) always completes. A second Ctrl-C that cut
  `ray.shutdown()` short used to leave Ray's agents running and the driver exiting 1, silently.

Without main.py's handlers (rlpar used as a library), `HeldInterrupts` and `shielded` work alone.
Long waits look at `stop_requested` (a signal asked the block under way to stop) and `failing`
(a registered check says the run cannot go on, e.g. its Ray instance is lost) to end early.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
INTERRUPTED_EXIT_CODE = 130

# Process-wide, and only used once main.py installed its handlers (mode is not None): a library
# caller's next run must not inherit an earlier run's stop.
_process: dict[str, Any] = {"mode": None, "signalled": False, "stopping": False}


def exit_at_once_on_signals() -> None:
    """main.py, before its slow imports: nothing needs cleaning up yet, so a signal exits 130 at
    once (a KeyboardInterrupt inside an import would end in a traceback and exit code -2)."""
    _install("exit")


def _drop_dropped_interrupts(unraisable) -> None:
    """Python reports a KeyboardInterrupt it had to drop (raised inside a weakref callback or a
    __del__) with a traceback: not an error here, as the stop still happens (see _on_signal)."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def stop_on_signals() -> None:
    """main.py, once the run may start processes: a signal raises KeyboardInterrupt (the run
    stops and cleans up); once main.py's handling of it calls `stop_under_way`, signals are
    only noted. Called again for the next job of a sweep, it stops there if a signal came
    during the last job's clean-up."""
    if _process["signalled"]:
        raise KeyboardInterrupt
    _process["stopping"] = False
    sys.unraisablehook = _drop_dropped_interrupts
    _install("raise")


def stop_under_way() -> None:
    """From now on signals are only noted: what runs next is clean-up that must complete."""
    if _process["mode"] is not None:
        _process["stopping"] = True


def ignore_signals() -> None:
    """main.py, once the run is over: Python's exit puts the default handlers back before it ends,
    and a signal then killed the process (exit -2) instead of letting it exit 130. Ignored
    signals stay ignored (no process is started after this: they would inherit it)."""
    _process["stopping"] = True
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def interrupted() -> bool:
    """Whether a SIGINT or SIGTERM has come since main.py installed its handlers."""
    return _process["signalled"]


def signals_stop_the_process() -> bool:
    """Whether main.py's handlers are installed and a signal would end this process now (it is
    not yet in a stop's clean-up, where signals are only noted)."""
    return _process["mode"] is not None and not _process["stopping"]


def _install(mode: str) -> None:
    """Signals this process was started with ignored stay ignored (a background job of a
    non-interactive shell ignores Ctrl-C: the shell's Ctrl-C is not meant for it)."""
    _process["mode"] = mode
    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _on_signal)


def _on_signal(signum, frame):
    _process["signalled"] = True
    if _process["stopping"]:
        return
    if _process["mode"] == "exit":
        os.write(2, b"\nrlpar: interrupted during start-up\n")
        os._exit(INTERRUPTED_EXIT_CODE)
    # Raised again for every signal until the stop is under way (its handler calls
    # stop_under_way): Python drops an exception raised while it runs a weakref callback or a
    # __del__ (seen: in importlib's module-lock callback), and the run would go on.
    raise KeyboardInterrupt


def _stopping() -> bool:
    return _process["stopping"]


_held_blocks: list = []  # the HeldInterrupts blocks under way, innermost last


def stop_requested() -> bool:
    """Whether a signal has asked a HeldInterrupts block under way to stop. Code that may wait
    long inside one, e.g. for hundreds of workers to boot, checks this and stops sooner than the
    block's safe point: before a first iteration there is nothing to finish."""
    return any(block.requested for block in _held_blocks)


class HeldInterrupts:
    """Within the block, SIGINT and SIGTERM only set `requested` (and print `message` once);
    the caller stops at its next safe point. With `second_stops_at_once`, a second signal raises
    KeyboardInterrupt at once and sets `forced`. Their handlers are put back at the end; if a
    stop was requested, what follows is the stop's clean-up, which later signals leave alone.

    Takes over only signals whose handler is Python code (Python's Ctrl-C, main.py's), and only
    on the main thread, where signals are handled."""

    def __init__(self, message: str, *, second_stops_at_once: bool = False):
        self.message = message
        self.second_stops_at_once = second_stops_at_once
        self.requested = False
        self.forced = False
        self._previous: dict = {}

    def __enter__(self):
        if _process["mode"] is not None and _process["signalled"] and not _process["stopping"]:
            self.requested = True  # a signal whose KeyboardInterrupt Python dropped: stop here
        _held_blocks.append(self)
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                if callable(signal.getsignal(sig)):
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        _process["signalled"] = True
        if _stopping():
            return
        if self.requested:
            if self.second_stops_at_once:
                self.forced = True
                stop_under_way()
                raise KeyboardInterrupt
            return
        self.requested = True
        print(self.message, file=sys.stderr, flush=True)

    def __exit__(self, *exc_info):
        if self in _held_blocks:
            _held_blocks.remove(self)
        if self.requested:
            stop_under_way()  # before main.py's handler is back: it then only notes signals
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        return False


@contextmanager
def shielded():
    """Signals are only noted within the block: for clean-up that must complete whoever calls it
    (main.py, a test, a notebook). A signal noted here still makes main.py exit 130."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            if callable(signal.getsignal(sig)):
                previous[sig] = signal.signal(sig, _note_only)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _note_only(signum, frame):
    _process["signalled"] = True
