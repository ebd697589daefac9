"""What tests know of processes, read from /proc: who descends from whom, who still runs."""

import os
import signal
import time
from pathlib import Path


def stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of a process, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), fields[0], int(fields[19])


def running(pid: int) -> bool:
    """False once it has exited (a zombie has: only its exit status waits to be collected)."""
    info = stat(pid)
    return info is not None and info[1] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants_of(pid: int) -> dict[tuple[int, int], str]:
    """Every descendant, however deep (Ray's workers are grandchildren): (pid, start time) -> cmdline."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := stat(int(entry))) is not None:
            children.setdefault(info[0], []).append(int(entry))
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            info = stat(child)
            if info is not None and (child, info[2]) not in found:
                found[(child, info[2])] = cmdline(child)
                todo.append(child)
    return found


def orphans(me: int, earlier) -> dict[tuple[int, int], str]:
    """Processes re-parented to `me` (a subreaper) that were not among `earlier`, and their
    descendants: what a stopped run left behind."""
    found = {}
    for (pid, started), command in descendants_of(me).items():
        info = stat(pid)
        if info and info[0] == me and (pid, started) not in earlier:
            found[(pid, started)] = command
            found.update(descendants_of(pid))
    return found


def still_running(processes: dict[tuple[int, int], str]) -> dict[int, str]:
    """Those of `processes` still running (the same ones: a reused pid has another start time)."""
    alive = {}
    for pid, started in processes:
        info = stat(pid)
        if info is not None and info[2] == started and info[1] != "Z":
            alive[pid] = cmdline(pid) or processes[(pid, started)]
    return alive


def left_running(family: dict[tuple[int, int], str], adopted, timeout: float) -> dict[int, str]:
    """Those of a run's processes `family`, and of the orphans `adopted()` lists, still running
    after waiting up to `timeout` seconds for them to go."""
    deadline = time.monotonic() + timeout
    while (left := {**still_running(family), **still_running(adopted())}) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def wait_until(condition, proc, timeout: float, what: str, poll_s: float = 0.05) -> None:
    """Poll `condition()` while `proc` (a subprocess.Popen) runs; fail if it exits or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            stderr = proc.stderr.read()[-3000:] if proc.stderr is not None else ""
            raise AssertionError(f"exited with {proc.returncode} before {what}: {stderr}")
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(poll_s)


def default_sigint() -> None:
    """preexec_fn for a child the test will Ctrl-C: a test run started as a background job of a
    non-interactive shell has SIGINT ignored, and children would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def rows_while_stopped(proc, metrics: Path, act) -> int:
    """Stop `proc` (SIGSTOP), count the complete rows of its metrics.jsonl, `act()` (send it a
    signal, kill one of its processes), and let it go on (SIGCONT). The count is exact however
    busy the machine: a run that stops in the iteration under way logs at most one row more."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        rows = metrics.read_text().count("\n") if metrics.exists() else 0
        act()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    return rows
