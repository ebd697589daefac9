"""Starting or joining Ray, on loopback unless the user names a cluster.

By default rlpar starts a private Ray instance bound to 127.0.0.1 with the dashboard off and
shuts it down at the end. `hardware=cluster ray.address=HOST:PORT` (or `auto`) joins a cluster
started with `ray start`; rlpar then ships its own package to the workers (`py_modules`).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from rlpar.cluster.auth import cluster_auth_mode, require_token_auth, set_auth_mode, token_source, users_auth_mode
from rlpar.cluster.errors import RayHeadLostError, RayInstanceLostError
from rlpar.cluster.ray_messages import quiet_expected_warnings
from rlpar.interrupts import INTERRUPTED_EXIT_CODE, HeldInterrupts, shielded, signals_stop_the_process

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # rlpar/
REPO_ROOT = PACKAGE_DIR.parent
WAIT_SLICE_S = 0.25  # a wait on Ray looks this often whether the private instance is still whole
VITAL_PROCESSES = ("gcs_server", "raylet")  # without either, a private instance cannot go on
SIGNAL_GRACE_S = 1.0  # a signal during a private instance's start-up not raised in this long: stop from a thread
HEAD_PROBE_INTERVAL_S = 0.5  # a joined cluster's head is asked this often whether it still answers
HEAD_PROBE_TIMEOUT_S = 1.0
HEAD_LOST_AFTER_S = 5.0  # a head that has not answered for this long is taken for lost


def is_loopback(address: str) -> bool:
    host = address.split("://")[-1].rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def auto_address() -> tuple[str, str] | None:
    """The cluster Ray's `address="auto"` joins, and where that address came from: RAY_ADDRESS,
    else the file `ray start` writes (Ray 2.x: $RAY_TMPDIR, $TMPDIR or /tmp, then
    ray/ray_current_cluster). None when neither names one. (Ray's last resort, any GCS process
    `ps` shows, is left out: that may be another program's private instance.)"""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    address_file = current_cluster_file()
    if address_file.is_file():
        address = address_file.read_text().strip()
        if address:
            return address, str(address_file)
    return None


def current_cluster_file() -> Path:
    temp_dir = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(temp_dir) / "ray" / "ray_current_cluster"


def _prepare_environment(on_loopback: bool) -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage reports leave the machine
    if on_loopback:
        # Otherwise Ray advertises the machine's external address even for a local instance.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _join_with_clusters_auth(address: str | None) -> None:
    """Use the authentication mode of the cluster at `address`, found out by asking it (see
    rlpar.cluster.auth); a Ray client address (ray://) keeps the old rule: token mode when a
    token of this user's is at hand and no mode is chosen."""
    if address == "auto":
        found = auto_address()
        address = found[0] if found else None  # Ray looks further; nothing to ask here
    mode = cluster_auth_mode(address) if address else None
    if mode is not None and users_auth_mode() is None:
        set_auth_mode(mode)
    elif mode is None and "RAY_AUTH_MODE" not in os.environ and token_source() is not None:
        set_auth_mode("token")


def _start_private_instance(num_cpus: float | None, object_store_mb: int, namespace: str) -> None:
    _prepare_environment(on_loopback=True)
    require_token_auth(create_token=True)
    # Idle workers Ray would prestart for the driver compete with start-up on small machines
    # (docs/benchmarks.md, "Figures behind design choices"); env runners start their own workers anyway.
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    # Workers of a local instance inherit the driver's environment: cheaper than a runtime_env.
    paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    import ray

    _ray_init(
        ray,
        private=True,
        # "local": always a new instance. With no address, ray.init joins RAY_ADDRESS or the
        # cluster last started on this machine (ray/ray_current_cluster) and, given num_cpus,
        # fails ("When connecting to an existing cluster, num_cpus ... must not be provided").
        address="local",
        num_cpus=num_cpus or os.cpu_count(),
        include_dashboard=False,
        object_store_memory=object_store_mb * 1024 * 1024,
        _node_ip_address="127.0.0.1",
        namespace=namespace,
        log_to_driver=False,
        configure_logging=False,
    )
    _stop_error_listener(ray)


def _stop_error_listener(ray) -> None:
    """Stop the driver thread that Ray starts to print the cluster's error messages, as
    ray.shutdown would. Once a private instance's GCS had died, that thread crashed the driver
    (SIGSEGV inside its GCS poll, seen in CI) before the run could stop in one line; rlpar
    reports its runners' failures itself, and a private instance has no other cluster to hear."""
    worker = ray._private.worker.global_worker
    thread = getattr(worker, "listener_thread", None)
    if thread is None or not thread.is_alive():
        return
    worker.threads_stopped.set()
    worker.gcs_error_subscriber.close()  # ends its poll; the thread then sees threads_stopped
    thread.join(timeout=10)
    worker.threads_stopped.clear()


def _ray_init(ray, *, private: bool, **kwargs) -> None:
    """ray.init, leaving nothing behind when it fails or is interrupted.

    - Starting a private instance, a failure inside ray.init (a raylet that never registers:
      Ray gives up after 30 s) or a Ctrl-C or SIGTERM (which stops it at once) freezes and kills
      every process ray.init had started: raylet and GCS die with the driver, but the raylet's
      agents (ray::DashboardAgent, ray::RuntimeEnvAgent) were left running for good.
    - Joining a cluster starts no process here: Ctrl-C and SIGTERM are held until ray.init
      returns; it then disconnects and raises KeyboardInterrupt.
    - Where Python code handles SIGTERM (main.py's handler), it keeps doing so: see
      `_python_keeps_sigterm`. A default SIGTERM is left to Ray's handler, which cleans up."""
    quiet_expected_warnings(ray)
    if not private:
        interrupts = HeldInterrupts("\nrlpar: stopping once connected to Ray")
        with interrupts:
            with _python_keeps_sigterm(ray):
                ray.init(**kwargs)
        if interrupts.requested:
            ray.shutdown()
            raise KeyboardInterrupt
        return
    earlier = _descendants()
    try:
        with _python_keeps_sigterm(ray), _signals_seen_at_once(earlier):
            ray.init(**kwargs)
        _state["private_instance"] = PrivateInstance(ray)
    except BaseException:
        _state["private_instance"] = None
        with shielded():
            _kill_started_since(earlier)
            if ray.is_initialized():
                with _no_task_event_flush():
                    ray.shutdown()
        raise


@contextmanager
def _signals_seen_at_once(earlier: set):
    """Under main.py, while ray.init starts a private instance: a Ctrl-C or SIGTERM reaches
    Python's handler only between two calls into Ray, and one of them waits up to 30 s for a
    raylet that does not register (Ray's own limit, which killing the raylet does not cut short).
    The signal's byte on Python's wakeup fd is seen at once by a thread; if the handler has not
    stopped ray.init within SIGNAL_GRACE_S, that thread kills what ray.init started and ends
    the process, exit 130 (the run has written nothing yet; the kernel drops its directory's lock)."""
    if not signals_stop_the_process() or threading.current_thread() is not threading.main_thread():
        yield
        return
    wakeup_read, wakeup_write = os.pipe()
    stop_read, stop_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    wanted = {int(sig) for sig in (signal.SIGINT, signal.SIGTERM) if callable(signal.getsignal(sig))}
    done = threading.Event()

    def watch():
        while stop_read not in select.select([wakeup_read, stop_read], [], [])[0]:
            if not wanted & set(os.read(wakeup_read, 64)):
                continue
            if done.wait(SIGNAL_GRACE_S) or not signals_stop_the_process():
                return
            _kill_started_since(earlier)
            os.write(2, b"\nrlpar: interrupted during Ray's start-up\n")
            os._exit(INTERRUPTED_EXIT_CODE)

    previous = signal.set_wakeup_fd(wakeup_write, warn_on_full_buffer=False)
    watcher = threading.Thread(target=watch, daemon=True, name="rlpar-ray-start-signals")
    watcher.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous)
        os.write(stop_write, b"x")
        watcher.join()
        for fd in (wakeup_read, wakeup_write, stop_read, stop_write):
            os.close(fd)


def _descendants() -> set[tuple[int, float]]:
    import psutil

    return {key for process in psutil.Process().children(recursive=True) if (key := _identity(process))}


def _identity(process) -> tuple[int, float] | None:
    """(pid, start time): a pid alone may have been reused by another process."""
    import psutil

    try:
        return process.pid, process.create_time()
    except psutil.Error:
        return None


def _kill_started_since(earlier: set) -> None:
    """Kill every descendant of this process that `earlier` does not hold: those ray.init
    started. Frozen first (SIGSTOP), round after round until no new one shows: a frozen process
    starts nothing, and none dies to leave its children to init, out of sight."""
    import psutil

    me = psutil.Process()
    frozen: dict[Any, Any] = {}  # identity -> process
    for _ in range(50):
        new = [p for p in me.children(recursive=True) if _identity(p) not in earlier | frozen.keys()]
        if not new:
            break
        for process in new:
            try:
                process.suspend()
                frozen[_identity(process)] = process
            except psutil.Error:  # gone already
                pass
    for process in frozen.values():
        try:
            process.kill()
        except psutil.Error:
            pass


@contextmanager
def _python_keeps_sigterm(ray):
    """While ray.init runs, keep Ray off SIGTERM if Python code handles it. Ray would:
    - replace the handler with its own, which exits at once (code 15, no final checkpoint, and
      inside ray.init Ray's processes left behind);
    - have the driver's core worker install a C++ crash handler on SIGTERM, which ray.shutdown()
      replaces with the default action: a SIGTERM during or after the shutdown then killed the
      driver outright (-15), before its clean-up. (The driver loses the C++ stack dump on a
      crash; Ray's own processes and workers keep theirs.)"""
    if not callable(signal.getsignal(signal.SIGTERM)):
        yield
        return
    utils, constants = ray._private.utils, ray._private.ray_constants
    saved = utils.set_sigterm_handler, constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER
    utils.set_sigterm_handler = lambda handler: None
    constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True  # read when the core worker is made
    try:
        yield
    finally:
        utils.set_sigterm_handler, constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = saved


class PrivateInstance:
    """The processes of the Ray instance rlpar started, so that none outlives the run.

    ray.shutdown() stops the node processes Ray launched (GCS, raylet, dashboard, monitors) but
    not, if the raylet goes first, the raylet's agents and workers: they were seen orphaned
    after a run. Only this instance's processes are swept, known by descent from the processes
    Ray launched for it; never "every child of this process" (a test's or a notebook's own).

    An instance whose GCS or raylet has died cannot go on (`lost`): no node can join a private
    instance to host the runners again, and Ray's core worker aborts the driver a minute after
    losing the GCS. Runs check it in every wait on Ray (RayConnection.wait) and stop; the stop
    then kills the rest at once, without the graceful round."""

    def __init__(self, ray):
        import psutil

        self.ray = ray
        self.psutil = psutil
        self.processes: dict[tuple[int, float], Any] = {}  # (pid, start time) -> psutil.Process
        node = ray._private.worker._global_node
        self.vital = {
            name: info.process for name in VITAL_PROCESSES for info in getattr(node, "all_processes", {}).get(name, [])
        }  # Popen: children of this process
        self.note_processes()

    def lost(self) -> str | None:
        """Why the instance cannot go on (its GCS or raylet has exited), or None. A few
        microseconds: one waitpid per process."""
        for name, process in self.vital.items():
            code = process.poll()
            if code is not None:
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
                return f"the private Ray instance's {name} (pid {process.pid}) died ({how})"
        return None

    def note_processes(self) -> None:
        """Add the instance's processes alive now (env runners start after ray.init)."""
        node = self.ray._private.worker._global_node  # the node ray.init started in this driver
        infos = getattr(node, "all_processes", {}).values() if node is not None else []
        for info in (info for per_type in infos for info in per_type):
            pid = getattr(getattr(info, "process", None), "pid", None)
            try:
                root = self.psutil.Process(pid) if pid else None
                family = [root, *root.children(recursive=True)] if root else []
            except self.psutil.Error:  # gone meanwhile
                continue
            for process in family:
                try:
                    self.processes.setdefault((process.pid, process.create_time()), process)
                except self.psutil.Error:
                    pass

    def stop(self, *, grace_s: float = 1.0) -> None:
        """ray.shutdown(), then SIGTERM and, after `grace_s`, SIGKILL for any of the instance's
        processes still running (psutil checks each is still the same process, not a reused pid)."""
        with shielded():  # a second Ctrl-C here left Ray half shut down
            self.note_processes()
            if self.lost():
                self._kill_at_once()
            if self.ray.is_initialized():
                with _no_task_event_flush() if self.lost() else nullcontext():
                    self.ray.shutdown()
            alive = self._wait(list(self.processes.values()), grace_s)
            for signal_name in ("terminate", "kill"):
                for process in alive:
                    try:
                        getattr(process, signal_name)()
                    except self.psutil.Error:
                        pass
                alive = self._wait(alive, grace_s)

    def _kill_at_once(self) -> None:
        """A lost instance has nothing to shut down gracefully: its processes are killed at once."""
        for process in self.processes.values():
            try:
                process.kill()
            except self.psutil.Error:
                pass

    def _wait(self, processes: list, timeout_s: float) -> list:
        """Those of `processes` still running after up to `timeout_s`. A zombie counts as gone: it
        has exited, and an orphan's is reaped by init, whenever init gets to it."""
        deadline = time.monotonic() + timeout_s
        while True:
            alive = [process for process in processes if self._running(process)]
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.05)

    def _running(self, process) -> bool:
        try:
            return process.is_running() and process.status() != self.psutil.STATUS_ZOMBIE
        except self.psutil.Error:
            return False


@contextmanager
def _no_task_event_flush():
    """ray.shutdown() without flushing task events to the GCS: with the GCS dead it waited 5 s
    for that (Ray's core worker aborts the process a minute after losing the GCS, so the stop
    must be quick). Ray re-reads its settings on Config.initialize; the variable is put back."""
    from ray._raylet import Config

    name = "RAY_task_events_shutdown_flush_timeout_ms"
    saved = os.environ.get(name)
    os.environ[name] = "0"
    Config.initialize("")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


class HeadWatch:
    """Whether the head of a joined cluster is still there: its GCS port accepts a connection.

    Ray's core worker, once it has lost the GCS, aborts the driver after
    gcs_rpc_server_reconnect_timeout_s (60 s), with no chance to checkpoint or say why; the
    driver's calls to the GCS meanwhile just wait. A run asks this in every wait on Ray and
    before each call to the GCS, and stops with a final checkpoint once the head has not
    answered for HEAD_LOST_AFTER_S. (A TCP connect is answered by the head's kernel: a GCS
    that is busy, even stopped, still counts as there.)"""

    def __init__(self, gcs_address: str):
        host, _, port = gcs_address.rpartition(":")
        self.address = (host.strip("[]"), int(port))
        self.next_probe = 0.0
        self.unanswered_since: float | None = None
        self.last_error = ""

    @property
    def doubtful(self) -> bool:
        """The last probe went unanswered: calls to the GCS may hang until Ray aborts."""
        return self.unanswered_since is not None

    def lost(self, *, wait: bool = False) -> str | None:
        """Why the head is taken for lost, or None. At most one probe every HEAD_PROBE_INTERVAL_S;
        with `wait`, while the head does not answer, probe on until it does or is lost (at most
        HEAD_LOST_AFTER_S): for the caller about to call the GCS."""
        while True:
            now = time.monotonic()
            if now >= self.next_probe:
                self.next_probe = now + HEAD_PROBE_INTERVAL_S
                self._probe(now)
            if self.unanswered_since is not None and now - self.unanswered_since >= HEAD_LOST_AFTER_S:
                host, port = self.address
                return (
                    f"the Ray cluster's head ({host}:{port}) stopped answering ({self.last_error}, "
                    f"for {now - self.unanswered_since:.0f} s)"
                )
            if not (wait and self.doubtful):
                return None
            time.sleep(max(self.next_probe - time.monotonic(), 0.0))

    def _probe(self, now: float) -> None:
        try:
            socket.create_connection(self.address, timeout=HEAD_PROBE_TIMEOUT_S).close()
        except OSError as err:
            self.last_error = err.strerror or type(err).__name__
            if self.unanswered_since is None:
                self.unanswered_since = now
            return
        self.unanswered_since = None


_state: dict = {"private_instance_pending": False, "private_instance": None}


def stop_private_instance() -> None:
    """Stop the private instance rlpar started in this process, if one runs: main.py calls this
    however the run ends, also when interrupted before a RayConnection adopted the instance."""
    instance, _state["private_instance"] = _state["private_instance"], None
    _state["private_instance_pending"] = False
    if instance is not None:
        instance.stop()


def start_private_instance_early(*, num_cpus: float | None, object_store_mb: int, namespace: str = "rlpar") -> None:
    """Start the private instance now (main thread); the next RayConnection adopts it and shuts
    it down at the end. main.py does this while another thread imports torch: Ray's boot takes about
    as long as the rest of start-up. (ray.init itself must stay on the main
    thread: started from another one, its GCS client never connects.)"""
    _start_private_instance(num_cpus, object_store_mb, namespace)
    _state["private_instance_pending"] = True


class RayConnection:
    """Context for one run's use of Ray: remembers whether rlpar started it, to stop only that."""

    def __init__(
        self,
        *,
        address: str | None,
        num_cpus: float | None,
        object_store_mb: int,
        namespace: str = "rlpar",
        py_modules=(),
    ):
        """`py_modules`: the user's own code the workers of a user's cluster need (an env's module),
        shipped with rlpar's package; a private instance's workers find it as this process does."""
        on_loopback = not address or is_loopback(address)
        _prepare_environment(on_loopback)
        import ray

        self.ray = ray
        self.started_here = False
        self.head: HeadWatch | None = None  # a joined cluster's head, watched
        self.lost: str | None = None  # why the instance or cluster cannot go on, once found out
        if _state["private_instance_pending"] and not address and ray.is_initialized():
            _state["private_instance_pending"] = False
            self.started_here = True
            return
        if ray.is_initialized():
            return
        if address:
            _join_with_clusters_auth(address)
            loopback = {"_node_ip_address": "127.0.0.1"} if on_loopback else {}
            _ray_init(
                ray,
                private=False,
                address=address,
                runtime_env={"py_modules": [str(PACKAGE_DIR), *py_modules]},
                namespace=namespace,
                log_to_driver=False,
                configure_logging=False,
                **loopback,
            )
            if not address.startswith("ray://"):  # (a Ray Client connection has no GCS of its own to watch)
                self.head = HeadWatch(ray.get_runtime_context().gcs_address)
        else:
            _start_private_instance(num_cpus, object_store_mb, namespace)
        self.started_here = True

    @property
    def stops_instance(self) -> bool:
        """Whether `shutdown` stops a private instance, and with it every actor on it."""
        return self.started_here and _state["private_instance"] is not None

    def check(self, *, calling_gcs: bool = False) -> None:
        """RayInstanceLostError once the private instance's GCS or raylet has died: its runners
        cannot come back, and Ray's core worker would abort this process a minute later.
        RayHeadLostError once a joined cluster's head has stopped answering (HeadWatch);
        `calling_gcs`: the caller is about to call the GCS, which waits for a head that does not
        answer until Ray aborts the process: while it does not, wait until it does or is lost."""
        instance = _state["private_instance"] if self.stops_instance else None
        reason = instance.lost() if instance is not None else None
        if reason:
            self.lost = reason
            raise RayInstanceLostError(f"{reason}; its workers cannot go on, and no node can join a private instance")
        if self.head is not None and (reason := self.head.lost(wait=calling_gcs)):
            self.lost = reason
            raise RayHeadLostError(
                f"{reason}; the run cannot go on without it (to continue on another cluster: "
                f"resume=RUN_DIR ray.address=HOST:PORT)"
            )

    def wait(self, refs: list, *, timeout: float | None) -> list:
        """The refs of `refs` that are ready, after waiting up to `timeout` (None: no limit) for
        the first, in slices between which the private instance is checked (`check`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.check()
            left = WAIT_SLICE_S if deadline is None else min(max(deadline - time.monotonic(), 0.0), WAIT_SLICE_S)
            ready, rest = self.ray.wait(refs, num_returns=1, timeout=left)
            if ready or (deadline is not None and time.monotonic() >= deadline):
                break
        if ready and rest:
            ready += self.ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        return ready

    def shutdown(self) -> None:
        """Stop the private instance, processes and all; only disconnect from a user's cluster."""
        if self.started_here and _state["private_instance"] is not None:
            stop_private_instance()
        elif self.started_here and self.ray.is_initialized():
            with _no_task_event_flush() if self.lost else nullcontext():
                self.ray.shutdown()
        self.started_here = False
