"""`algo.compile`: a whole gradient step (forward, loss, backward, gradient clipping and Adam)
compiled with torch.compile into one graph; or, for optimisers other than Adam, the loss alone.

Why the whole step: for a 64x64 actor-critic the maths of a minibatch step is microseconds, and
eager torch spends the rest dispatching ~150 small ops; one graph saves most of that dispatch
(figures: docs/benchmarks.md, "Compiled learner"; `benchmarks/learner_step.py`).

Compile cost: seconds from Inductor's on-disk cache, which rlpar keeps in ~/.cache/rlpar/inductor
(TORCHINDUCTOR_CACHE_DIR, if you set none), tens of seconds cold, once per machine and shape. PPO
compiles after its first (eager) update, in a thread the learner waits for without touching
torch meanwhile, so that a signal still stops the run at once; the others compile on their first
step. `auto` compiles only runs long enough to win even cold.

The compiled step reads and writes the model's own parameters and LeanAdam's own state tensors,
in place, so state dicts and checkpoints are the same compiled or eager. A non-finite gradient
skips the step inside the graph; the skips are counted once per update (`settle`).

`algo.precision` other than fp32 (rlpar.learning.precision) learns eagerly: the compiled step is
float32's, with no autocast and no loss scaler in its graph.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path

import torch

from rlpar.learning.optim import LeanAdam
from rlpar.learning.step import GuardedStep

AUTO_MIN_GRADIENT_STEPS = 100_000
CACHE_DIR = Path.home() / ".cache" / "rlpar" / "inductor"
COMPILE_THREAD = "rlpar-compile"


def _compile_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == COMPILE_THREAD]


def compiling_in_background() -> bool:
    """Whether a background compile is still running. The interpreter must not shut down under
    one (torch aborts in C++ when its static state is torn down mid-compile): a script's exit
    waits for it (atexit), and main.py, once everything is closed, leaves with os._exit."""
    return any(thread.is_alive() for thread in _compile_threads())


@atexit.register
def _wait_for_background_compiles() -> None:
    for thread in _compile_threads():
        thread.join()


def compile_setting(setting: str | bool, *, expected_gradient_steps: int, precision: str = "fp32",
                    recurrent: bool = False) -> bool:
    """Whether to compile: `true`, `false`, or `auto` (by the run's expected gradient steps);
    never with a precision other than fp32 (see above), nor for a recurrent model, whose steps
    unroll a loop over a sequence of varying valid steps."""
    if precision != "fp32" or recurrent:
        return False
    if setting == "auto":
        return expected_gradient_steps >= AUTO_MIN_GRADIENT_STEPS
    return bool(setting)


def torch_compile(fn, *, dynamic: bool = False):
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(CACHE_DIR))
    return torch.compile(fn, dynamic=dynamic)


def gradient_step(loss_fn, *, model: torch.nn.Module, guard: GuardedStep, compiled: bool, dynamic: bool = False,
                  unroll: int = 1):
    """One gradient step on a minibatch, returning the detached outputs of
    `loss_fn(**minibatch) -> (loss, *parts)`: eager; or compiled whole (LeanAdam); or, with
    other optimisers, with the loss compiled. `dynamic`: minibatch sizes vary."""
    if not compiled:
        return EagerStep(loss_fn, guard=guard)
    if isinstance(guard.optimizer, LeanAdam):
        return CompiledStep(loss_fn, model=model, guard=guard, dynamic=dynamic, unroll=unroll)
    return EagerStep(torch_compile(loss_fn, dynamic=dynamic), guard=guard)


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
    """Forward, loss, backward (torch.func), global-norm clipping and Adam (the same update as
    torch's fused kernel that LeanAdam calls), as one compiled graph."""

    def __init__(self, loss_fn, *, model: torch.nn.Module, guard: GuardedStep, dynamic: bool = False, unroll: int = 1):
        self.guard, self.optimizer = guard, guard.optimizer
        self.model = model
        self.names = ["model." + name for name, _ in model.named_parameters()]
        self.loss_call = _LossCall(model, loss_fn)
        self.lr = torch.tensor(0.0)
        self.finite_flags: list[torch.Tensor] = []
        self.compiled = torch_compile(self._step, dynamic=dynamic)
        self.unroll = unroll
        self.compiled_many = torch_compile(self._steps, dynamic=dynamic)
        self.eager = EagerStep(loss_fn, guard=guard)
        self._compiling: threading.Thread | None = None
        self._compile_error: BaseException | None = None
        self._pending_example: dict | None = None

    def compile_in_background(self, example: dict) -> None:
        """Compile for minibatches like `example` (tensors with a leading dimension of `unroll`),
        on copies of the state, once the first update's steps are done (`settle`): a run's first
        update is never delayed by its compile.

        The compile runs in a thread, and `settle` waits for it: the main thread does no torch
        work and no sampling meanwhile, only watches for a signal (`interrupts.interrupted`),
        so that Ctrl-C or SIGTERM stops the run at once rather than after the compile. PyTorch's
        compiler is not thread-safe (pytorch/pytorch#105943, #118260): two full test runs crashed
        (segmentation faults in Dynamo's tracing, test_signals.py) while the compile traced and
        the main thread went on training eagerly and sampling through Ray, once during the first
        update and once during the second."""
        self._pending_example = example

    def _start_compile(self) -> None:
        example, self._pending_example = self._pending_example, None

        def compile_now():
            try:
                params = [p.detach().clone() for p in self.model.parameters()]
                opt = self.optimizer
                state = [[t.clone() for t in group] for group in (opt.exp_avgs, opt.exp_avg_sqs, opt.steps)]
                inputs = (params, *state, torch.tensor(0.0), self.guard.max_grad_norm)
                self.compiled_many(*inputs, example)
                self.compiled(*inputs, _one(example, 0))  # for leftover minibatches
            except BaseException as err:  # noqa: BLE001 - re-raised by the first step
                self._compile_error = err

        self._compiling = threading.Thread(target=compile_now, name=COMPILE_THREAD, daemon=True)
        self._compiling.start()

    def wait_compiled(self) -> None:
        """Compile now if it has not started, and wait (tests and benchmarks time the compiled step)."""
        if self._pending_example is not None:
            self._start_compile()
        if self._compiling is not None:
            self._compiling.join()
        self._compiled_ready()

    def _compiled_ready(self) -> bool:
        """False until the background compile is done; raises what it raised, once done."""
        if self._pending_example is not None:
            return False
        if self._compiling is not None:
            if self._compiling.is_alive():
                return False
            self._compiling = None
            if self._compile_error is not None:
                raise self._compile_error
        return True

    def _loss(self, params: list[torch.Tensor], minibatch: dict):
        loss, parts = torch.func.functional_call(self.loss_call, dict(zip(self.names, params)), (minibatch,))
        return loss, parts

    def _step(self, params, exp_avgs, exp_avg_sqs, steps, lr, max_norm: float, minibatch: dict):
        grads, (loss, parts) = torch.func.grad_and_value(self._loss, has_aux=True)(params, minibatch)
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        finite = torch.isfinite(norm)
        scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        (beta1, beta2), eps = self.optimizer.betas, self.optimizer.eps
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
        results = [self._step(params, exp_avgs, exp_avg_sqs, steps, lr, max_norm, _one(minibatches, j))
                   for j in range(_count(minibatches))]
        outputs = tuple(torch.stack(parts) for parts in zip(*(r[0] for r in results)))
        return outputs, torch.stack([r[1] for r in results])

    def _inputs(self) -> tuple:
        self.lr.fill_(self.optimizer.param_groups[0]["lr"])
        params = [p.detach() for p in self.model.parameters()]  # the parameters' own storage
        opt = self.optimizer
        return params, opt.exp_avgs, opt.exp_avg_sqs, opt.steps, self.lr, self.guard.max_grad_norm

    def __call__(self, **minibatch) -> tuple:
        if not self._compiled_ready():
            return self.eager(**minibatch)
        outputs, finite = self.compiled(*self._inputs(), minibatch)
        self.finite_flags.append(finite)
        return outputs

    def steps(self, **minibatches) -> tuple:
        """Gradient steps on `minibatches` (a leading dimension of minibatches), the outputs
        stacked: `unroll` at a time in one graph, the rest one by one."""
        if not self._compiled_ready():
            return self.eager.steps(**minibatches)
        if _count(minibatches) != self.unroll:
            return _one_by_one(self, minibatches)
        outputs, finite = self.compiled_many(*self._inputs(), minibatches)
        self.finite_flags.extend(finite.unbind(0))
        return outputs

    def settle(self) -> None:
        """Count the non-finite steps since the last call (one device sync per update); after
        the first update, compile if a compile is waiting, and wait for it (see
        `compile_in_background`)."""
        if self.finite_flags:
            flags = torch.stack(self.finite_flags).tolist()
            self.finite_flags.clear()
            for finite in flags:
                self.guard.count(finite)
        if self._pending_example is not None:
            self._start_compile()
            self._wait_unless_interrupted()

    def _wait_unless_interrupted(self) -> None:
        """Wait for the compile thread, or until a signal asks the run to stop or the run cannot
        go on (steps then stay eager, and main.py leaves past the still-compiling thread with
        os._exit)."""
        from rlpar.interrupts import failing, interrupted

        while self._compiling.is_alive() and not interrupted() and not failing():
            self._compiling.join(0.05)
