"""Ray's messages to the driver: into main.log, never onto the console.

Ray prints the cluster's error messages (a worker died, a node left, a task raised) from a thread
of the driver through one function, with no filter of its own: during faults that a run survives
they came as long lines, tracebacks and raylet state dumps, where rlpar says one line per fault
itself (a runner replaced, a service restarted). This wraps that function: each message goes to
the `rlpar` logger for main.log alone (logging's `extra`, as rlpar.logging.run_log.FILE_ONLY),
and those rlpar's layout makes expected are dropped: the raylet's warning when more worker
processes run than 4x the CPUs ("16 PYTHON worker processes have been started ... tasks with
fractional CPU requests"), exactly what `workers=16` on a small machine asks for.
"""

from __future__ import annotations

import logging

EXPECTED = ("worker processes have been started on node",)
FILE_ONLY = {"file_only": True}  # rlpar.logging.run_log's console leaves these records out
log = logging.getLogger("rlpar")


def quiet_expected_warnings(ray) -> None:
    """Send Ray's messages to main.log, less the expected ones (idempotent; a no-op when a Ray
    version prints them another way)."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    print_to_stdstream = getattr(worker, "print_to_stdstream", None)
    if print_to_stdstream is None or getattr(print_to_stdstream, "rlpar_filtered", False):
        return

    def to_main_log(data, *args, **kwargs):
        source = data.get("actor_name") or data.get("task_name") or data.get("pid") or "ray"
        for line in data.get("lines", []):
            if not any(text in str(line) for text in EXPECTED):
                log.info("(%s) %s", source, line, extra=FILE_ONLY)

    to_main_log.rlpar_filtered = True  # type: ignore[attr-defined]  # marks it as installed (idempotence)
    worker.print_to_stdstream = to_main_log  # type: ignore[union-attr]  # not None: it has print_to_stdstream
