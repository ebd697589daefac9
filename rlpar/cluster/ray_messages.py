"""Ray's messages to the driver that a user of rlpar cannot act on.

The raylet warns when more worker processes run than 4x the CPUs ("16 PYTHON worker processes
have been started ... tasks with fractional CPU requests (e.g., num_cpus=0.1) allowing high
concurrency"): exactly what `workers=16` on a small machine asks for, with env runners of
`ray.cpus_per_worker: 0.1`. Ray prints its error messages from a thread of the driver through
one function, with no filter of its own; this wraps that function to drop that one message.
"""

from __future__ import annotations

EXPECTED = ("worker processes have been started on node",)


def quiet_expected_warnings(ray) -> None:
    """Drop the raylet's messages that rlpar's layout makes expected (idempotent; a no-op when a
    Ray version prints them another way)."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    print_to_stdstream = getattr(worker, "print_to_stdstream", None)
    if print_to_stdstream is None or getattr(print_to_stdstream, "rlpar_filtered", False):
        return

    def filtered(data, *args, **kwargs):
        lines = [line for line in data.get("lines", []) if not any(text in str(line) for text in EXPECTED)]
        if lines or not data.get("lines"):
            print_to_stdstream({**data, "lines": lines}, *args, **kwargs)

    filtered.rlpar_filtered = True
    worker.print_to_stdstream = filtered
