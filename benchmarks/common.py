"""What the benchmark scripts share: rlpar as a user runs it (main.py in a subprocess, its
metrics.jsonl read back), a side measured in a process of its own (a `RESULT {json}` line), the
machine and its load, and markdown tables.

Scripts run as `python benchmarks/<script>.py`, so this module is importable as `common`.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `import rlpar` and `tests.processes` from this clone
RLPAR_PYTHON = Path(sys.executable)  # the scripts run with rlpar's Python (another peer's: its own venv)
RESULT = "RESULT "


def machine() -> str:
    """One line naming when and where figures were taken: they hold for that machine only."""
    import torch

    return (f"{time.strftime('%Y-%m-%d %H:%M')} {platform.node()}, {os.cpu_count()} CPUs, "
            f"{platform.processor() or platform.machine()}, python {platform.python_version()}, torch {torch.__version__}, "
            f"load {os.getloadavg()[0]:.2f}")


def wait_for_quiet(max_load: float, wait_s: float) -> float:
    """Wait (at most `wait_s`) for the 1-minute load average to fall under `max_load`; the load
    the run then starts at, to print beside its figures (a shared machine's speed drifts)."""
    deadline = time.monotonic() + wait_s
    while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(2.0)
    return os.getloadavg()[0]


def read_rows(metrics: Path) -> list[dict]:
    """The complete rows of a run's metrics.jsonl (none if it is not there yet)."""
    try:
        text = Path(metrics).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n") and line.strip()]


def run_main(overrides: list[str], run_dir: Path, *, python: Path | str = sys.executable, timeout: float | None = None,
             env: dict | None = None) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`main.py OVERRIDES progress=false run_dir=RUN_DIR` as a user runs it; its exit and rows."""
    command = [str(python), "main.py", *overrides, "progress=false", f"run_dir={run_dir}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    return done, read_rows(Path(run_dir) / "metrics.jsonl")


@dataclass
class TimedRun:
    """A main.py run's exit, metrics rows, and the seconds from its launch at which each row was
    first seen."""

    returncode: int
    rows: list[dict]
    arrivals: list[float]
    process_s: float
    output: str


def run_main_timed(overrides: list[str], *, python: Path | str = sys.executable, timeout_s: float,
                   env: dict | None = None, poll_s: float = 0.02, stop_when=None) -> TimedRun:
    """`main.py OVERRIDES progress=false run_dir=<temp folder>` as a user runs it, its metrics rows
    timed from the launch as they arrive (polled every `poll_s`: the arrival times are, if
    anything, late); killed after `timeout_s`. `stop_when(row)`: once a row makes it true, the run
    is stopped with SIGTERM (Ctrl-C's stop: it checkpoints and exits)."""
    with tempfile.TemporaryDirectory(prefix="rlpar_timed_") as tmp:
        metrics = Path(tmp) / "run" / "metrics.jsonl"
        command = [str(python), "main.py", *overrides, "progress=false", f"run_dir={metrics.parent}"]
        with open(Path(tmp) / "output.txt", "w+") as log:
            start = time.time()
            proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
            arrivals: list[float] = []
            stopping = False
            while True:
                exited = proc.poll() is not None
                if metrics.exists():
                    with open(metrics) as f:
                        lines = [line for line in f if line.endswith("\n")]
                    new = lines[len(arrivals):]
                    arrivals += [time.time() - start] * len(new)
                    if stop_when is not None and not stopping and any(stop_when(json.loads(line)) for line in new):
                        proc.terminate()  # our own child, by its handle
                        stopping = True
                if exited:
                    break
                if time.time() - start > timeout_s:
                    proc.kill()  # our own child, by its handle
                    proc.wait()
                    break
                time.sleep(poll_s)
            process_s = time.time() - start
            log.seek(0)
            output = log.read()
        rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    return TimedRun(proc.returncode, rows, arrivals, process_s, output)


def report(result: dict) -> None:
    """What a side measured, for the driver that started it (`result_of`)."""
    print(RESULT + json.dumps(result), flush=True)


def result_of(command: list[str], *, env: dict | None = None) -> dict:
    """Run one side in a fresh process (its own Python, e.g. another venv) and read its `report`."""
    done = subprocess.run([str(part) for part in command], cwd=ROOT, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(map(str, command[1:]))} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT):])


def fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def rotated(items: list, by: int) -> list:
    """`items` starting at `by` (modulo): run order that changes with the seed, so that a shared
    machine's drift does not always favour the side that runs first."""
    shift = by % len(items)
    return items[shift:] + items[:shift]


class LoadSampler:
    """The 1-minute load average every 5 s while a run goes on (the run's own processes included)."""

    def __init__(self):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.wait(5):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
