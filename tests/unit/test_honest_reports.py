"""Reports that say what happens: returns to three significant digits, a time limit named in the
budget and done lines and used by the ETA, and a run that stops before its time limit."""

import io
import time

import pytest

from rlpar.algos.base import StepResult
from rlpar.logging.progress import ProgressLine, budget_line, fmt_significant
from rlpar.runtime.trainer import Trainer


def row(iteration: int, steps: int, wall: float, episode_return=None) -> dict:
    return {"iteration": iteration, "env_steps": steps, "wall_time_s": wall, "fps": 0.0, "episodes": 3,
            "episode_return_mean": episode_return, "episode_return_best_mean": episode_return}


@pytest.mark.parametrize("value, shown", [(0.96, "0.960"), (0.965, "0.965"), (-1172.4, "-1,172"), (12.34, "12.3"),
                                          (99.96, "100"), (-0.5, "-0.500"), (500.0, "500"), (None, "n/a")])
def test_returns_show_three_significant_digits(value, shown):
    assert fmt_significant(value) == shown


def test_the_progress_and_done_lines_show_a_return_of_0_96_as_0_960():
    stream = io.StringIO()
    progress = ProgressLine(1024, stream=stream, every_s=0)
    progress.update(row(1, 1024, 2.0, episode_return=0.96))
    progress.summary(row(1, 1024, 2.0, episode_return=0.96), "run")
    line, done = stream.getvalue().splitlines()
    assert "return    0.960 " in line
    assert "return 0.960 (best 0.960)" in done and "time limit" not in done


def test_a_time_limit_is_named_in_the_budget_line_and_drives_the_eta():
    line = budget_line(total_steps=100_000_000, time_limit_s=20)
    assert line.startswith("rlpar: training to 100,000,000 env steps or for 20 s, whichever comes first "
                           "(total_steps=N, time_limit_s=S to change)")
    progress = ProgressLine(100_000_000, stream=io.StringIO(), every_s=0, time_limit_s=20)
    progress.eta_s(row(1, 512, 5.0))
    assert progress.eta_s(row(2, 1024, 6.0)) == pytest.approx(14.0)  # the time limit is nearer than 100M steps
    assert progress.fraction_done(row(2, 1024, 6.0)) == pytest.approx(0.3)
    steps_first = ProgressLine(2048, stream=io.StringIO(), every_s=0, time_limit_s=1000)
    steps_first.eta_s(row(1, 512, 5.0))
    assert steps_first.eta_s(row(2, 1024, 6.0)) == pytest.approx(2.0)  # 1,024 steps left at 512 a second


def test_the_done_line_says_the_time_limit_stopped_the_run():
    stream = io.StringIO()
    ProgressLine(100_000_000, stream=stream, time_limit_s=20).summary(row(40, 20480, 19.9, episode_return=21.0), "run")
    assert stream.getvalue().startswith("done: time limit reached (time_limit_s=20): 20,480 of 100,000,000 steps "
                                        "in 19.9 s (1,029 steps/s)")


class _SteadyAlgorithm:
    """Iterations of a steady length, as a sampler and a learner would take."""

    def __init__(self, iteration_s: float):
        self.iteration_s = iteration_s

    def training_step(self) -> StepResult:
        time.sleep(self.iteration_s)
        return StepResult(env_steps=64)


@pytest.mark.slow
def test_a_time_limited_run_stops_within_one_iteration_before_its_limit():
    """Iterations of 0.1 s and a limit of 0.55 s: the run stops after 5 (0.5 s), since a sixth
    would end at 0.6 s; without looking ahead it would train to 0.6 s. (On a loaded machine an
    iteration takes longer: the next one, as long as the last, would still end past the limit.)"""
    trainer = Trainer(algorithm=_SteadyAlgorithm(0.1), env_spec=None, total_steps=10**9, seed=0, time_limit_s=0.55)
    metrics = trainer.fit()
    assert trainer.done and trainer.iteration >= 3
    assert metrics["wall_time_s"] < 0.55 <= trainer.wall_time() + trainer._last_iteration_wall_s
