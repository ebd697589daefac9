"""`algo.compile`: a whole gradient step (forward, loss, backward, gradient clipping and Adam)
compiled with torch.compile into one graph; or, for optimisers other than Adam, the loss alone.

Why the whole step: for a 64x64 actor-critic the maths of a minibatch step is microseconds, and
eager torch spends the rest dispatching ~150 small ops; one graph saves most of that dispatch
(figures: docs/benchmarks.md, "Compiled learner"; `benchmarks/learner_step.py`).

Compile cost: seconds from Inductor's on-disk cache, which rlpar keeps in ~/.cache/rlpar/inductor
(TORCHINDUCTOR_CACHE_DIR, if you set none), tens of seconds cold, once per machine and shape. So
the learner steps eagerly while a forked child compiles and fills the cache (`WarmCompile`), then
compiles from the cache. `auto` compiles only runs long enough to win.

When the learner switches (`CompileSwitch`, `algo.compile_switch`): at a gradient step fixed in
advance, the optimiser's own step count, waiting there for the compile if it is not done yet
(once per machine and shape, with a cold cache). The compiled graph's floats differ from eager's
in the last bits, so a switch at whatever moment the compile ends would make two runs of one seed
differ; at a fixed step they are the same, cold cache or warm, and a resumed run switches where
the uninterrupted one did. `ready` switches as soon as the compile is done instead: no wait on a
cold cache, but runs of one seed differ.

The compiled step reads and writes the model's own parameters and torch's Adam's own state tensors,
in place, so state dicts and checkpoints are the same compiled or eager. A non-finite gradient
skips the step inside the graph; the skips are counted once per update (`settle`).

`algo.precision` other than fp32 (rlpar.learning.optimization.precision) learns eagerly: the compiled step is
float32's, with no autocast and no loss scaler in its graph.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import signal
import sys
import time
from pathlib import Path

import torch

from rlpar.errors import first_line
from rlpar.learning.optimization.optim import adam_state
from rlpar.learning.optimization.step import GuardedStep
from rlpar.logging.run_log import FILE_ONLY

AUTO_MIN_GRADIENT_STEPS = 100_000
# The default switch: a warm cache's compile (seconds) is done by then, at a few thousand steps a second
COMPILE_SWITCH_STEP = 5_000
WHEN_READY = "ready"  # algo.compile_switch: as soon as the compile is done (runs of one seed then differ)
WARM_UP_LIMIT_S = 900.0  # a cold compile takes tens of seconds of one core; far longer, the child is stuck
CACHE_DIR = Path.home() / ".cache" / "rlpar" / "inductor"
FAILURE_CHARS = 16_000  # of a failed compile's message (a compiler's output), kept in main.log

log = logging.getLogger("rlpar")


def compile_setting(
    setting: str | bool,
    *,
    expected_gradient_steps: int,
    precision: str = "fp32",
    recurrent: bool = False,
    images: bool = False,
) -> bool:
    """Whether to compile: `true`, `false`, or `auto` (by the run's expected gradient steps);
    never with a precision other than fp32 (see above), nor for a recurrent model, whose steps
    unroll a loop over a sequence of varying valid steps."""
    if precision != "fp32" or recurrent:
        return False
    if setting == "auto":  # a CNN's step is its convolutions: compiled, no faster here (docs/benchmarks.md)
        return expected_gradient_steps >= AUTO_MIN_GRADIENT_STEPS and not images
    return bool(setting)


def torch_compile(fn, *, dynamic: bool = False):
    """Compiled in the calling thread (`compile_threads` 1): Inductor's pool of compile workers is
    threads that a fork does not copy, and a warm-up child (WarmCompile) waiting on it hung. The
    step is one small graph, so the pool saved little."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(CACHE_DIR))
    return torch.compile(fn, dynamic=dynamic, options={"compile_threads": 1})


def gradient_step(
    loss_fn,
    *,
    model: torch.nn.Module,
    guard: GuardedStep,
    compiled: bool,
    dynamic: bool = False,
    unroll: int = 1,
    switch: int | str = COMPILE_SWITCH_STEP,
):
    """One gradient step on a minibatch, returning the detached outputs of
    `loss_fn(**minibatch) -> (loss, *parts)`: eager; or compiled whole (Adam); or, with
    other optimisers, with the loss compiled. `dynamic`: minibatch sizes vary. `switch`: the
    gradient step from which the compiled graph is used (`CompileSwitch`)."""
    if not compiled:
        return EagerStep(loss_fn, guard=guard)
    if _plain_adam(guard.optimizer):
        return CompiledStep(loss_fn, model=model, guard=guard, dynamic=dynamic, unroll=unroll, switch=switch)
    return EagerStep(
        _WarmLoss(
            loss_fn,
            dynamic=dynamic,
            device=next(model.parameters()).device,
            switch=CompileSwitch(switch, optimizer=guard.optimizer),
        ),
        guard=guard,
    )


def optimizer_steps(optimizer) -> int:
    """The gradient steps `optimizer` has applied, read from its own state (which checkpoints
    keep): its `step` (0 for one that keeps none)."""
    first = optimizer.param_groups[0]["params"][0]
    return int(optimizer.state.get(first, {}).get("step", 0))


def _plain_adam(optimizer) -> bool:
    """Whether `optimizer` is the Adam that `CompiledStep` writes out in its graph (one parameter
    group, no weight decay, AMSGrad or other variants: rlpar.learning.optimization.optim.adam's)."""
    if not isinstance(optimizer, torch.optim.Adam) or len(optimizer.param_groups) != 1:
        return False
    group = optimizer.param_groups[0]
    return (
        group["weight_decay"] == 0
        and not group["amsgrad"]
        and not group["maximize"]
        and not group.get("decoupled_weight_decay", False)
        and all(p in optimizer.state for p in group["params"])
    )


class CompileSwitch:
    """When a learner's steps go from eager to compiled: from the optimiser's step `at` on, fixed
    in advance, waiting there for the warm-up compile if it has not finished (runs of one seed are
    then the same: the compiled graph's floats differ from eager's in the last bits); or, with
    `at="ready"`, as soon as the compile is done (no wait; not reproducible). On a GPU, and after
    `wait_compiled`, the compile is here, at the first step."""

    said_not_reproducible = False  # once per process

    def __init__(self, at: int | str, *, optimizer):
        self.at, self.optimizer = at, optimizer
        self.reached: int | None = None  # the step at which the switch came

    def use_compiled(self, warm: WarmCompile, args: tuple = (), kwargs: dict | None = None) -> bool:
        """Whether this call takes `warm`'s compiled function (its warm-up starts at the first call)."""
        if warm.in_process or warm.device.type != "cpu":
            return warm.ready(args, kwargs)
        if self.at == WHEN_READY:
            if not CompileSwitch.said_not_reproducible:
                CompileSwitch.said_not_reproducible = True
                log.warning(
                    "algo.compile_switch=ready: the learner takes its compiled step as soon as it is compiled, "
                    "a moment that varies, so runs of one seed differ (a gradient step, the default, keeps "
                    "them the same)"
                )
            return warm.ready(args, kwargs)
        if self.reached is None:
            steps = optimizer_steps(self.optimizer)
            assert isinstance(self.at, int)  # a gradient step (WHEN_READY is answered above)
            if steps < self.at:
                warm.ready(args, kwargs)  # its warm-up goes on meanwhile
                return False
            self.reached = steps
        if not warm.in_use:
            since = time.monotonic()
            if not warm.ready(args, kwargs, wait=True, step=self.reached):
                return False  # its compile failed: eager for the rest of the run
            warm.in_use = True
            log.info(
                "the learner's step is compiled from gradient step %d (waited %.1f s for its compile)",
                self.reached,
                time.monotonic() - since,
                extra=FILE_ONLY,
            )
        return True


class WarmCompile:
    """A torch.compile'd function that is compiled first in a forked child, which leaves the
    compiled graphs in Inductor's on-disk cache, while the caller goes on with its eager twin
    (`ready` is False); once the child is done, the first call here compiles from that cache.

    A child rather than a thread: PyTorch's compiler is not thread-safe (pytorch/pytorch#105943,
    #118260; full test runs crashed in Dynamo's tracing while a compile thread traced and the
    main thread trained). The child is a fork, so it compiles the very function, inputs and
    state the caller has, on its own copy of them. One child at a time (the cores are the
    learner's and the workers'). CUDA cannot be used in a forked child: on a GPU, and after
    `in_process`, the first call compiles here and waits."""

    said_waiting = False  # the console line before the learner waits: once per process

    def __init__(self, fn, *, device: torch.device):
        self.fn = fn
        self.device = torch.device(device)
        self.in_process = False
        self.in_use = False  # taken by a CompileSwitch
        self.state = "new"  # new -> warming -> ready, or failed (eager for the rest of the run)
        self.child: _WarmChild | None = None

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def ready(self, args: tuple = (), kwargs: dict | None = None, *, wait: bool = False, step: int = 0) -> bool:
        """Whether the compiled function can be called now; the first call starts the warm-up, on
        `args` and `kwargs` (those of the call the caller then makes eagerly). `wait`: the
        caller's switch (at gradient step `step`) has come: wait for the warm-up to end, starting
        it first if another function's child held it back."""
        if self.state == "warming":
            self._poll(wait=wait, step=step)
        elif self.state == "new":
            if self.in_process or self.device.type != "cpu":
                self.state = "ready"
                return True
            if wait and _WarmChild.running:
                self.say_waiting(step)
                _WarmChild.wait_for_all()
            if not _WarmChild.running:
                self.child = _WarmChild.start(self.fn, args, kwargs or {})
                self.state = "warming"
                if wait:
                    self._poll(wait=True, step=step)
        return self.state == "ready"

    @classmethod
    def say_waiting(cls, step: int) -> None:
        if not cls.said_waiting:
            cls.said_waiting = True
            print(
                f"rlpar: gradient step {step:,}: waiting for the learner's compile to take over (algo.compile_switch; "
                f"tens of seconds once per machine and shape, while the compile cache is cold)",
                flush=True,
            )

    def _poll(self, *, wait: bool, step: int) -> None:
        assert self.child is not None  # polled while warming, when a child runs
        outcome = self.child.outcome()
        if outcome is None and wait:
            self.say_waiting(step)
            outcome = self.child.outcome(wait=True)
        if outcome is None:
            return
        self.child = None
        if outcome == "":
            self.state = "ready"
        else:
            self.state = "failed"
            print(
                f"rlpar: the compile failed in its warm-up process ({first_line(outcome)}); the learner stays "
                f"eager (the compiler's message is in main.log)",
                file=sys.stderr,
                flush=True,
            )
            log.info("the compile failed in its warm-up process:\n%s", outcome, extra=FILE_ONLY)


class _WarmLoss:
    """A loss compiled alone (optimisers other than Adam), eager until its compile is warm."""

    def __init__(self, loss_fn, *, dynamic: bool, device: torch.device, switch: CompileSwitch):
        self.eager = loss_fn
        self.compiled = WarmCompile(torch_compile(loss_fn, dynamic=dynamic), device=device)
        self.switch = switch

    def __call__(self, **minibatch):
        return (self.compiled if self.switch.use_compiled(self.compiled, (), minibatch) else self.eager)(**minibatch)


class _WarmChild:
    """A forked process that calls a compiled function once (and backward through its loss, for
    a compiled loss: AOTAutograd compiles the backward graph at the first backward), then
    exits. It dies with its parent, ignores the parent's signal handlers, and says why it
    failed through a pipe."""

    running: dict[int, _WarmChild] = {}

    def __init__(self, pid: int, reader: int):
        self.pid, self.reader = pid, reader
        self.started = time.monotonic()
        self.result: str | None = None

    @classmethod
    def wait_for_all(cls) -> None:
        """Wait for the children running (another function's warm-up); each keeps its outcome for its caller."""
        for child in list(cls.running.values()):
            child.outcome(wait=True)

    @classmethod
    def start(cls, fn, args: tuple, kwargs: dict) -> _WarmChild:
        reader, writer = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(reader)
            _warm_up(fn, args, kwargs, writer, parent=os.getppid())
        os.close(writer)
        child = cls(pid, reader)
        cls.running[pid] = child
        return child

    def outcome(self, *, wait: bool = False) -> str | None:
        """None while it runs (unless `wait`); then "" (compiled) or why it failed."""
        while self.result is None:
            self.result = self._check()
            if self.result is None:
                if not wait:
                    break
                time.sleep(0.05)
        return self.result

    def _check(self) -> str | None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else: whether it compiled is unknown
            self.stop()
            return "its exit status was lost"
        if pid == 0:
            if time.monotonic() - self.started < WARM_UP_LIMIT_S:
                return None
            self.stop()  # a fork that hangs (a lock another thread held at the fork) never ends
            return f"no compile within {WARM_UP_LIMIT_S:.0f} s"
        del self.running[self.pid]
        with os.fdopen(self.reader, "rb") as pipe:
            message = pipe.read().decode(errors="replace").strip()
        code = os.waitstatus_to_exitcode(status)
        return "" if code == 0 else message or f"exit code {code}"

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.reader)
        self.running.pop(self.pid, None)


def _warm_up(fn, args: tuple, kwargs: dict, writer: int, *, parent: int) -> None:
    code = 1
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:  # forked from a thread other than the main one: it had none
            pass
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        out = fn(*args, **kwargs)
        loss = out[0] if isinstance(out, tuple) else out
        if isinstance(loss, torch.Tensor) and loss.requires_grad:
            loss.backward()
        code = 0
    except BaseException as err:  # noqa: BLE001 - reported by the parent
        os.write(writer, f"{type(err).__name__}: {err}"[:FAILURE_CHARS].encode())
    finally:
        os._exit(code)


@atexit.register
def stop_background_compiles() -> None:
    """Stop the warm-up children still compiling (a run that ends before its compile is warm)."""
    for child in list(_WarmChild.running.values()):
        child.stop()


def _count(minibatches: dict) -> int:
    """Minibatches in `minibatches` (tensors with a leading dimension of minibatches)."""
    return next(iter(minibatches.values())).shape[0]


def _one(minibatches: dict, index: int) -> dict:
    return {k: v[index] for k, v in minibatches.items()}


def _one_by_one(step, minibatches: dict) -> tuple:
    """`step` on each of `minibatches` in turn, its outputs stacked."""
    count = _count(minibatches)
    if count == 1:  # the usual eager case: views, no copies
        return tuple(out[None] for out in step(**_one(minibatches, 0)))
    results = [step(**_one(minibatches, j)) for j in range(count)]
    return tuple(torch.stack(parts) for parts in zip(*results))


class EagerStep:
    unroll = 1

    def __init__(self, loss_fn, *, guard: GuardedStep):
        self.loss_fn, self.guard = loss_fn, guard

    def __call__(self, **minibatch) -> tuple:
        with self.guard.autocast():
            loss, *parts = self.loss_fn(**minibatch)
        self.guard(loss, samples=len(next(iter(minibatch.values()))))
        return (loss.detach(), *(part.detach() for part in parts))

    def steps(self, **minibatches) -> tuple:
        """Gradient steps on `minibatches` (a leading dimension of minibatches), one by one,
        their outputs stacked."""
        return _one_by_one(self, minibatches)

    def settle(self) -> None:
        """Nothing pending: the eager step counts non-finite gradients as it meets them."""

    def wait_compiled(self) -> None:
        """Nothing compiles in the background here."""


class _LossCall(torch.nn.Module):
    """Calls `loss_fn` with the model's parameters swapped for the ones torch.func passes."""

    def __init__(self, model: torch.nn.Module, loss_fn):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, minibatch: dict):
        loss, *parts = self.loss_fn(**minibatch)
        return loss, tuple(parts)


class CompiledStep:
    """Forward, loss, backward (torch.func), global-norm clipping and Adam (the update of
    `torch.optim.Adam`, on that optimiser's own state tensors), as one compiled graph."""

    def __init__(
        self,
        loss_fn,
        *,
        model: torch.nn.Module,
        guard: GuardedStep,
        dynamic: bool = False,
        unroll: int = 1,
        switch: int | str = COMPILE_SWITCH_STEP,
    ):
        self.guard, self.optimizer = guard, guard.optimizer
        # constants of the graph (read outside it: the group's lr changes between steps)
        self.betas, self.eps = guard.optimizer.param_groups[0]["betas"], guard.optimizer.param_groups[0]["eps"]
        self.switch = CompileSwitch(switch, optimizer=guard.optimizer)
        self.model = model
        self.names = ["model." + name for name, _ in model.named_parameters()]
        self.loss_call = _LossCall(model, loss_fn)
        self.lr = torch.tensor(0.0)
        self.finite_flags: list[torch.Tensor] = []
        device = next(model.parameters()).device
        self.compiled = WarmCompile(torch_compile(self._step, dynamic=dynamic), device=device)
        self.unroll = unroll
        self.compiled_many = WarmCompile(torch_compile(self._steps, dynamic=dynamic), device=device)
        self.eager = EagerStep(loss_fn, guard=guard)

    def wait_compiled(self) -> None:
        """From now on, compile in this process at first use, and wait (tests and benchmarks time
        the compiled step)."""
        self.compiled.in_process = self.compiled_many.in_process = True

    def _loss(self, params: list[torch.Tensor], minibatch: dict):
        loss, parts = torch.func.functional_call(self.loss_call, dict(zip(self.names, params)), (minibatch,))
        return loss, parts

    def _step(self, params, exp_avgs, exp_avg_sqs, steps, lr, max_norm: float, minibatch: dict):
        grads, (loss, parts) = torch.func.grad_and_value(self._loss, has_aux=True)(params, minibatch)
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        finite = torch.isfinite(norm)
        scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        (beta1, beta2), eps = self.betas, self.eps
        for param, grad, exp_avg, exp_avg_sq, step in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
            grad = grad * scale
            new_step = step + 1
            new_avg = exp_avg.lerp(grad, 1 - beta1)
            new_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
            denom = new_avg_sq.sqrt() / (1 - beta2**new_step).sqrt() + eps
            new_param = param - (lr / (1 - beta1**new_step)) * new_avg / denom
            param.copy_(torch.where(finite, new_param, param))
            exp_avg.copy_(torch.where(finite, new_avg, exp_avg))
            exp_avg_sq.copy_(torch.where(finite, new_avg_sq, exp_avg_sq))
            step.copy_(torch.where(finite, new_step, step))
        return (loss, *parts), finite

    def _steps(self, params, exp_avgs, exp_avg_sqs, steps, lr, max_norm: float, minibatches: dict):
        """`_step` on each of `minibatches` (tensors with a leading dimension of `unroll`), in turn."""
        results = [
            self._step(params, exp_avgs, exp_avg_sqs, steps, lr, max_norm, _one(minibatches, j))
            for j in range(_count(minibatches))
        ]
        outputs = tuple(torch.stack(parts) for parts in zip(*(r[0] for r in results)))
        return outputs, torch.stack([r[1] for r in results])

    def _inputs(self) -> tuple:
        self.lr.fill_(self.optimizer.param_groups[0]["lr"])
        params = [p.detach() for p in self.model.parameters()]  # the parameters' own storage
        exp_avgs, exp_avg_sqs, steps = adam_state(self.optimizer)
        return params, exp_avgs, exp_avg_sqs, steps, self.lr, self.guard.max_grad_norm

    def __call__(self, **minibatch) -> tuple:
        inputs = (*self._inputs(), minibatch)
        if not self.switch.use_compiled(self.compiled, inputs):
            return self.eager(**minibatch)
        outputs, finite = self.compiled(*inputs)
        self.finite_flags.append(finite)
        return outputs

    def steps(self, **minibatches) -> tuple:
        """Gradient steps on `minibatches` (a leading dimension of minibatches), the outputs
        stacked: `unroll` at a time in one graph, the rest one by one."""
        if _count(minibatches) != self.unroll:
            return _one_by_one(self, minibatches)
        inputs = (*self._inputs(), minibatches)
        if not self.switch.use_compiled(self.compiled_many, inputs):
            return self.eager.steps(**minibatches)
        outputs, finite = self.compiled_many(*inputs)
        self.finite_flags.extend(finite.unbind(0))
        return outputs

    def settle(self) -> None:
        """Count the non-finite steps since the last call (one device sync per update)."""
        if self.finite_flags:
            flags = torch.stack(self.finite_flags).tolist()
            self.finite_flags.clear()
            for finite in flags:
                self.guard.count(finite)
