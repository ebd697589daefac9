"""A compiled step is first compiled in a forked child that fills Inductor's on-disk cache, while
the learner goes on eagerly; then it compiles here from that cache (rlpar.learning.optimization.compiled)."""

import os
import time

import pytest
import torch

from rlpar.learning.optimization.compiled import WarmCompile, _WarmChild, stop_background_compiles, torch_compile


def settle(warm: WarmCompile, args: tuple, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while warm.state == "warming" and time.monotonic() < deadline:
        warm.ready(args)
        time.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_compile_that_fails_in_its_child_leaves_the_caller_eager_and_says_why(capfd):
    def broken(x):
        raise ValueError("no graph here")

    warm = WarmCompile(torch_compile(broken), device=torch.device("cpu"))
    x = torch.ones(3)
    assert warm.ready((x,)) is False and warm.state == "warming"
    pid = warm.child.pid
    settle(warm, (x,), timeout_s=60)
    assert warm.state == "failed" and warm.ready((x,)) is False and gone(pid) and not _WarmChild.running
    assert "ValueError: no graph here" in capfd.readouterr().err


def test_stopping_a_run_stops_the_child_still_compiling():
    warm = WarmCompile(torch_compile(lambda x: (x * 3).cos()), device=torch.device("cpu"))
    assert warm.ready((torch.ones(5),)) is False
    pid = warm.child.pid
    assert _WarmChild.running == {pid: warm.child}
    stop_background_compiles()
    assert gone(pid) and not _WarmChild.running


def test_one_child_at_a_time_and_on_a_gpu_or_when_asked_the_compile_is_here():
    first = WarmCompile(torch_compile(lambda x: x + 1), device=torch.device("cpu"))
    second = WarmCompile(torch_compile(lambda x: x - 1), device=torch.device("cpu"))
    try:
        assert first.ready((torch.ones(2),)) is False and first.state == "warming"
        assert second.ready((torch.ones(2),)) is False and second.state == "new"  # waits for the first child
    finally:
        stop_background_compiles()
    here = WarmCompile(torch_compile(lambda x: x * 2), device=torch.device("cpu"))
    here.in_process = True  # wait_compiled(): tests and benchmarks time the compiled step
    assert here.ready((torch.ones(2),)) is True and not _WarmChild.running
    assert WarmCompile(torch_compile(lambda x: x), device=torch.device("cuda")).ready(()) is True


@pytest.mark.slow
def test_the_caller_stays_eager_until_the_child_has_warmed_the_cache_then_compiles_from_it(tmp_path, monkeypatch):
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    torch.compile(lambda x: x.cos() + 1)(torch.ones(3))  # a compile here first: its worker pool must not hang the fork

    def fn(x, w):
        return torch.tanh(x @ w).sum(dim=1) * 0.5 + 1.0

    warm = WarmCompile(torch_compile(fn), device=torch.device("cpu"))
    x, w = torch.randn(8, 4), torch.randn(4, 4)
    assert warm.ready((x, w)) is False  # the caller runs its eager twin meanwhile
    settle(warm, (x, w))
    assert warm.state == "ready" and any((tmp_path / "inductor").rglob("*")), "the child left no cache"
    counters.clear()
    torch.testing.assert_close(warm(x, w), fn(x, w))
    assert counters["inductor"]["fxgraph_cache_hit"] == 1 and counters["inductor"]["fxgraph_cache_miss"] == 0


def test_auto_compiles_long_runs_of_vector_models_only():
    from rlpar.learning.optimization.compiled import compile_setting

    long = dict(expected_gradient_steps=1_000_000)
    assert compile_setting("auto", **long) is True
    assert compile_setting("auto", expected_gradient_steps=1_000) is False
    assert compile_setting("auto", **long, images=True) is False  # a CNN's step: no faster compiled on a CPU
    assert compile_setting(True, **long, images=True) is True  # asked for
    assert compile_setting(True, **long, recurrent=True) is False


def test_a_child_that_does_not_finish_in_time_is_stopped_and_the_caller_stays_eager(monkeypatch, capfd):
    import rlpar.learning.optimization.compiled as compiled

    monkeypatch.setattr(compiled, "WARM_UP_LIMIT_S", 0.0)
    warm = WarmCompile(torch_compile(lambda x: (x * 5).exp()), device=torch.device("cpu"))
    assert warm.ready((torch.ones(4),)) is False
    pid = warm.child.pid
    assert warm.ready((torch.ones(4),)) is False and warm.state == "failed" and gone(pid) and not _WarmChild.running
    assert "no compile within 0 s" in capfd.readouterr().err


@pytest.mark.slow
def test_a_failed_compile_says_one_line_and_keeps_the_compilers_output_in_main_log(tmp_path, monkeypatch, capfd):
    """A C++ compiler that fails (here one that prints 16 lines of errors): the console gets one
    line, the run's main.log the whole message, and the caller stays eager."""
    import torch._inductor.config

    from rlpar.logging.run_log import RunLog

    compiler = tmp_path / "failing-g++"
    compiler.write_text('#!/bin/sh\ncase " $* " in *" -o "*) for i in $(seq 16); do echo "kernel.cpp:$i:1: error: '
                        'line $i" >&2; done; exit 1;; esac\nexec g++ "$@"\n')
    compiler.chmod(0o755)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    warm = WarmCompile(torch_compile(lambda x: (x * 7).sin() + 0.25), device=torch.device("cpu"))
    with torch._inductor.config.patch({"cpp.cxx": (None, str(compiler))}), RunLog(tmp_path):
        assert warm.ready((torch.ones(5),), wait=True) is False and warm.state == "failed"
    out, err = capfd.readouterr()
    assert [line for line in err.splitlines() if line.strip()] == [
        "rlpar: the compile failed in its warm-up process (InductorError: CppCompileError: C++ compile error); the "
        "learner stays eager (the compiler's message is in main.log)"]
    assert "error: line" not in out
    assert "kernel.cpp:16:1: error: line 16" in (tmp_path / "main.log").read_text()


def test_the_opt_in_switch_when_ready_says_once_that_runs_of_one_seed_differ(monkeypatch, caplog):
    import logging

    from rlpar.learning.optimization.compiled import CompileSwitch
    from rlpar.learning.optimization.optim import adam

    monkeypatch.setattr(CompileSwitch, "said_not_reproducible", False)
    switch = CompileSwitch("ready", optimizer=adam([torch.zeros(2, requires_grad=True)], lr=0.1))
    warm = WarmCompile(torch_compile(lambda x: x + 2), device=torch.device("cpu"))
    try:
        with caplog.at_level(logging.WARNING, logger="rlpar"):
            assert switch.use_compiled(warm, (torch.ones(2),)) is False  # compiling in its child meanwhile
            switch.use_compiled(warm, (torch.ones(2),))
    finally:
        stop_background_compiles()
    said = [record.getMessage() for record in caplog.records if "compile_switch=ready" in record.getMessage()]
    assert len(said) == 1 and "runs of one seed differ" in said[0]
