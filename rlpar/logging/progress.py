"""A live progress line on a terminal, a line every few seconds otherwise, and the final summary."""

from __future__ import annotations

import math
import sys
import time


def _fmt_duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds < 3600 else f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _fmt_return(value) -> str:
    """Three significant digits (0.965, 12.3, -1,172), right-aligned in 8 characters."""
    return f"{fmt_significant(value):>8}"


def fmt_significant(value, digits: int = 3) -> str:
    """`value` to at least `digits` significant digits, without an exponent: 0.96 shows as 0.960,
    -1172.4 as -1,172 (whole numbers in full, with thousands separators); n/a for None or NaN."""
    if value is None or value != value:
        return "n/a"
    rounded = float(f"{value:.{digits}g}")  # 99.96 has 3 digits before the point once rounded
    if rounded == 0 or not math.isfinite(rounded) or abs(rounded) >= 10 ** (digits - 1):
        return f"{value:,.0f}"  # whole numbers in full
    decimals = digits - 1 - math.floor(math.log10(abs(rounded)))
    return f"{value:,.{decimals}f}"


def _fmt_failures(metrics: dict) -> str:
    """Shown only once something has failed, so a healthy run's line stays short."""
    workers, envs = metrics.get("worker_restarts", 0), metrics.get("env_restarts", 0)
    if not (workers or envs):
        return ""
    return f"  live workers {metrics.get('live_workers', '?')}, restarts: {workers} workers, {envs} envs"


def _fmt_frames_per_s(metrics: dict) -> str:
    """Emulator frames per second, where a step is several frames (Atari's frame skip)."""
    return f"frames/s {metrics['frames_per_s']:>9,.0f}  " if "frames_per_s" in metrics else ""


def _fmt_frames_summary(metrics: dict) -> str:
    if "frames" not in metrics:
        return ""
    return f", {metrics['frames']:,} frames, {metrics['frames'] / max(metrics['wall_time_s'], 1e-9):,.0f} frames/s"


def budget_line(
    *,
    total_steps: int,
    done_steps: int = 0,
    frames_per_step: int = 1,
    time_limit_s: float | None = None,
    advice: str | None = None,
) -> str:
    """What a run is about to train, said before it starts (an Atari preset runs 10M-50M steps),
    with its time limit when it has one, and `advice` (a cheaper setting, measured) on a line of its own."""
    frames = f" ({total_steps * frames_per_step:,} frames)" if frames_per_step != 1 else ""
    done = f", {done_steps:,} of them done" if done_steps else ""
    if time_limit_s is None:
        budget = f"training to {total_steps:,} env steps{frames}{done} (total_steps=N to change)"
    else:
        budget = (
            f"training to {total_steps:,} env steps{frames}{done} or for {time_limit_s:g} s, "
            f"whichever comes first (total_steps=N, time_limit_s=S to change)"
        )
    line = f"rlpar: {budget}; the ETA follows once the first iterations are measured"
    return line if advice is None else f"{line}\n{advice}"


class ProgressLine:
    def __init__(
        self,
        total_steps: int,
        stream=None,
        every_s: float = 5.0,
        enabled: bool = True,
        time_limit_s: float | None = None,
    ):
        self.total_steps = total_steps
        self.time_limit_s = time_limit_s
        self.stream = stream or sys.stdout
        self.interactive = self.stream.isatty()
        self.every_s = every_s
        self.enabled = enabled
        self._last = 0.0
        self._warm: tuple[int, float] | None = None  # (env steps, wall time) after the first iteration

    def eta_s(self, metrics: dict) -> float | None:
        """Seconds to the nearer limit: `total_steps` at the rate of the iterations since the first
        one (which holds start-up, compilation and warm-up), or the time limit; None before there
        is an iteration to measure."""
        steps, wall = metrics["env_steps"], metrics["wall_time_s"]
        if self._warm is None:
            self._warm = (steps, wall)
            return None
        rate = (steps - self._warm[0]) / max(wall - self._warm[1], 1e-9)
        to_steps = (self.total_steps - steps) / rate if rate > 0 else None
        if self.time_limit_s is None:
            return to_steps
        to_time = max(self.time_limit_s - wall, 0.0)
        return to_time if to_steps is None else min(to_steps, to_time)

    def fraction_done(self, metrics: dict) -> float:
        """How far the run is to the nearer of its limits (steps, time)."""
        done = metrics["env_steps"] / self.total_steps
        if self.time_limit_s:
            done = max(done, metrics["wall_time_s"] / self.time_limit_s)
        return min(done, 1.0)

    def update(self, metrics: dict) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        finished = self.fraction_done(metrics) >= 1.0
        eta = self.eta_s(metrics)
        if not self.interactive and now - self._last < self.every_s and not finished:
            return
        self._last = now
        steps, fps = metrics["env_steps"], metrics["fps"]
        pct = 100.0 * self.fraction_done(metrics)
        line = (
            f"[{pct:5.1f}%] it {metrics['iteration']:>5}  steps {steps:>10,}  fps {fps:>9,.0f}  "
            f"{_fmt_frames_per_s(metrics)}"
            f"return {_fmt_return(metrics['episode_return_mean'])}  "
            f"elapsed {_fmt_duration(metrics['wall_time_s'])}  eta {'--:--' if eta is None else _fmt_duration(eta)}"
            f"{_fmt_failures(metrics)}"
        )
        if self.interactive:
            self.stream.write("\r" + line + ("\n" if finished else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def summary(self, metrics: dict, run_dir: str) -> None:
        if not metrics:
            return
        if self.interactive:
            self.stream.write("\n")
        stopped_by_time = self.time_limit_s is not None and metrics["env_steps"] < self.total_steps
        why = f"time limit reached (time_limit_s={self.time_limit_s:g}): " if stopped_by_time else ""
        of_total = f" of {self.total_steps:,}" if stopped_by_time else ""
        self.stream.write(
            f"done: {why}{metrics['env_steps']:,}{of_total} steps in {metrics['wall_time_s']:.1f} s "
            f"({metrics['env_steps'] / max(metrics['wall_time_s'], 1e-9):,.0f} steps/s"
            f"{_fmt_frames_summary(metrics)}), "
            f"{metrics['episodes']} episodes, return {_fmt_return(metrics['episode_return_mean']).strip()} "
            f"(best {_fmt_return(metrics.get('episode_return_best_mean')).strip()}) -> {run_dir}\n"
        )
        self.stream.flush()
