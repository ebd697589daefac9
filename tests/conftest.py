import os
import signal
import sys
from pathlib import Path

# Before anything imports Ray: every Ray node and driver of the tests stays on 127.0.0.1.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

from rlpar.config.compose import compose_config  # noqa: E402
from tests.processes import descendants_of, orphans, stat, still_running  # noqa: E402


@pytest.fixture
def make_cfg(tmp_path):
    """Compose the real config with overrides, writing into a fresh run directory."""

    def _make(*overrides, run_dir=None):
        return compose_config(["progress=false", *overrides], run_dir=run_dir or tmp_path / "run")

    return _make


PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture
def adopted_orphans():
    """Make this process a child subreaper: whatever a run leaves behind is re-parented here
    instead of to init, so it stays findable. (Ray's processes rename themselves "ray::...",
    which also overwrites what /proc shows of their environment: no marker passed down to them
    could find them.) Yields a function listing the orphans adopted since (and their children)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    me = os.getpid()
    earlier = {(pid, started) for pid, started in descendants_of(me) if (stat(pid) or (None,))[0] == me}

    def adopted() -> dict[tuple[int, int], str]:
        """New children of ours, once the test's own (main.py) has been waited for, are orphans."""
        return orphans(me, earlier)

    try:
        yield adopted
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        left = adopted()
        for pid in still_running(left):
            try:
                os.kill(pid, signal.SIGKILL)  # only processes this test started
            except OSError:
                pass
        for pid, _ in left:
            try:
                os.waitpid(pid, 0)  # reap those re-parented here (others are not our children)
            except ChildProcessError:
                pass


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")  # never imported here: a test that has not imported Ray has not started it
    return ray is not None and ray.is_initialized()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that starts Ray in this process must be marked `ray`, or the quick tier
    (-m "not slow and not ray") would start Ray. (Ray started by a subprocess is not seen here.)"""
    before = _ray_initialized()
    result = yield
    if not before and _ray_initialized() and item.get_closest_marker("ray") is None:
        pytest.fail(f"{item.nodeid} started Ray in this process but is not marked @pytest.mark.ray", pytrace=False)
    return result
