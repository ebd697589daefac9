"""A live progress line on a terminal, a line every few seconds otherwise, and the final summary."""

from __future__ import annotations

import sys
import time


def _fmt_duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds < 3600 else f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _fmt_return(value) -> str:
    return "   n/a" if value is None else f"{value:8.1f}"


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


def budget_line(*, total_steps: int, done_steps: int = 0, frames_per_step: int = 1) -> str:
    """What a run is about to train, said before it starts (an Atari preset runs 10M-50M steps)."""
    frames = f" ({total_steps * frames_per_step:,} frames)" if frames_per_step != 1 else ""
    done = f", {done_steps:,} of them done" if done_steps else ""
    return (f"rlpar: training to {total_steps:,} env steps{frames}{done} (total_steps=N to change); "
            f"the ETA follows once the first iterations are measured")


class ProgressLine:
    def __init__(self, total_steps: int, stream=None, every_s: float = 5.0, enabled: bool = True):
        self.total_steps = total_steps
        self.stream = stream or sys.stdout
        self.interactive = self.stream.isatty()
        self.every_s = every_s
        self.enabled = enabled
        self._last = 0.0
        self._warm: tuple[int, float] | None = None  # (env steps, wall time) after the first iteration

    def eta_s(self, metrics: dict) -> float | None:
        """Seconds to `total_steps` at the rate of the iterations since the first one (which
        holds start-up, compilation and warm-up), or None before there is one to measure."""
        steps, wall = metrics["env_steps"], metrics["wall_time_s"]
        if self._warm is None:
            self._warm = (steps, wall)
            return None
        rate = (steps - self._warm[0]) / max(wall - self._warm[1], 1e-9)
        return (self.total_steps - steps) / rate if rate > 0 else None

    def update(self, metrics: dict) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        finished = metrics["env_steps"] >= self.total_steps
        eta = self.eta_s(metrics)
        if not self.interactive and now - self._last < self.every_s and not finished:
            return
        self._last = now
        steps, fps = metrics["env_steps"], metrics["fps"]
        pct = 100.0 * min(steps / self.total_steps, 1.0)
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
        self.stream.write(
            f"done: {metrics['env_steps']:,} steps in {metrics['wall_time_s']:.1f} s "
            f"({metrics['env_steps'] / max(metrics['wall_time_s'], 1e-9):,.0f} steps/s"
            f"{_fmt_frames_summary(metrics)}), "
            f"{metrics['episodes']} episodes, return {_fmt_return(metrics['episode_return_mean']).strip()} "
            f"(best {_fmt_return(metrics.get('episode_return_best_mean')).strip()}) -> {run_dir}\n"
        )
        self.stream.flush()
