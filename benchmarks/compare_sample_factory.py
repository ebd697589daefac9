"""Sample Factory 2 (APPO) against rlpar, side by side in one run, alternating: CartPole-v1 time to
475 and env steps/s, and Atari Pong frames/s.

    .venv/bin/python benchmarks/compare_sample_factory.py [--quick] [--out results.json]

Sample Factory 2.1.1 pins gymnasium<1.0 and numpy<2, so it runs in a venv of its own: `--sf2-python`,
or the one this script finds or builds at ~/.cache/rlpar/bench-venvs/sample-factory-2.1.1
(torch==2.13.0, the CPU build on these machines; sample-factory==2.1.1; gymnasium==0.29.1;
numpy==1.26.4; ale-py==0.9.0, whose wheel has the ROMs). Each SF2 run is
`benchmarks/sample_factory/sf2_run.py` in that venv, a fresh process.

CartPole-v1, seeds 0 1 2 (`--seeds`); per seed, the order of the runs rotates:
  - SF2: APPO with the settings of its own CartPole example (sf_examples/train_gym_env.py: batch 512,
    reward scale 0.1, no RNN, no V-trace) at learning rate 1e-3, and the execution settings that were
    fastest here to 475 (SF2_CARTPOLE; what was tried: docs/lab/2026-11-notebook.md). It stops at 475 or `--cartpole-budget-s`.
  - rlpar: `python main.py algo=<impala|appo|ppo> <parallel mode> seed=S` with the CartPole presets
    (RLPAR_CARTPOLE), run to the preset's budget.
  Clocks, the same for both: seconds from launching the process (a Python process each) to the first
  training result whose episode-return mean (each library's own, over its last 20 episodes: SF2's
  `--stats_avg=20`) is at least 475; env steps/s counted from the first training result to the last.
Pong (ALE/Pong-v5, sticky actions 0.25, frame skip 4 by the wrappers, 84x84 gray, 4 frames stacked),
one run each, `--pong-budget-s` seconds of training:
  - rlpar: `python main.py env=atari env.id=ALE/Pong-v5 algo=impala parallel=distributed workers=4
    time_limit_s=<budget>` (IMPALA's Atari preset);
  - SF2: APPO with its Atari settings (sf_examples/atari/atari_params.py: Nature CNN, rollout 128,
    batch 256, 4 epochs of 4 minibatches) on SF2's Atari wrappers over the same emulator, and the
    execution settings that were fastest here (SF2_PONG).
  Frames/s = agent steps x 4, steady state: frames between the first result after `--warmup-s`
  seconds of training and the last, over that time; also from launch (all frames / seconds since the
  process started).
Before each run the driver waits (at most `--wait-s`) for the 1-minute load average to fall under
`--max-load` and records the load it started at. Bars (the issue's): rlpar's best algorithm reaches
475 in at most 1/3 of SF2's time from launch, every seed; rlpar's IMPALA runs CartPole at 3x SF2's env
steps/s or more; rlpar's Pong frames/s (IMPALA, distributed) at least 3x SF2's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from common import ROOT, LoadSampler, fmt, machine, markdown_table, result_of, rotated, run_main_timed, wait_for_quiet

THRESHOLD = 475.0
FRAME_SKIP = 4
SF2_VENV = Path.home() / ".cache" / "rlpar" / "bench-venvs" / "sample-factory-2.1.1"
SF2_PINS = ["torch==2.13.0", "sample-factory==2.1.1", "gymnasium==0.29.1", "numpy==1.26.4", "ale-py==0.9.0"]
SF2_RUN = ROOT / "benchmarks" / "sample_factory" / "sf2_run.py"

# SF2's CartPole example (sf_examples/train_gym_env.py) with a learning rate of 1e-3 (SF2's default,
# 1e-4, plateaued near 250 for 300k steps; 3e-4 and 3e-3 were slower to 475) ...
SF2_CARTPOLE_LEARNING = ["--algo=APPO", "--use_rnn=False", "--recurrence=1", "--with_vtrace=False", "--batch_size=512",
                         "--reward_scale=0.1", "--learning_rate=0.001", "--stats_avg=20"]
# ... and the execution settings fastest to 475 on 2 cores (docs/lab/2026-11-notebook.md: what was tried)
SF2_CARTPOLE = {"flags": ["--serial_mode=True", "--async_rl=True", "--num_workers=2", "--num_envs_per_worker=20"],
                "torch_threads": 1}
# SF2's Atari settings come from sf_examples/atari/atari_params.py (sf2_run.py applies them);
# these are the execution settings fastest on 2 cores
SF2_PONG = {"flags": ["--serial_mode=True", "--async_rl=False", "--num_workers=2", "--num_envs_per_worker=4",
                      "--worker_num_splits=2"], "torch_threads": 1}
RLPAR_CARTPOLE = {  # name: overrides; the CartPole presets apply themselves
    "impala": ["algo=impala", "parallel=distributed", "workers=4"],
    "appo": ["algo=appo", "parallel=local"],
    "ppo": ["algo=ppo", "parallel=local"],
}
RLPAR_PONG = ["env=atari", "env.id=ALE/Pong-v5", "algo=impala", "parallel=distributed", "workers=4",
              "total_steps=100000000", "checkpoint.every=0"]


# -- SF2's venv ------------------------------------------------------------------------------------
def sf2_python(given: str | None) -> Path:
    """SF2's interpreter: the one given, or the cached venv (built on first use, about a minute)."""
    if given:
        return Path(given)
    python = SF2_VENV / "bin" / "python"
    check = [str(python), "-c", "import importlib.metadata as m; assert m.version('sample-factory') == '2.1.1'"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    print(f"# building Sample Factory 2's venv at {SF2_VENV} ({' '.join(SF2_PINS)})", flush=True)
    subprocess.run(["python3", "-m", "venv", str(SF2_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *SF2_PINS], check=True)
    return python


# -- one run of each side --------------------------------------------------------------------------
def run_sf2(python: Path, task: str, seed: int, budget_s: float, settings: dict, learning: list[str]) -> dict:
    command = [python, SF2_RUN, "--task", task, "--seed", seed, "--budget-s", budget_s]
    if task == "cartpole":
        command += ["--threshold", THRESHOLD]
    if settings["torch_threads"]:
        command += ["--torch-threads", settings["torch_threads"]]
    command += ["--", *learning, *settings["flags"]]
    r = result_of(command, env=dict(os.environ, BENCH_T0=repr(time.time())))
    curve = [(t, steps, ret) for t, steps, ret in r["curve"]]  # (s from launch, env steps, return mean)
    if not curve:
        raise RuntimeError(f"SF2 reported no training iteration (status {r['status']})")
    return {"curve": curve, "reached": r["reached"], "process_s": r["process_s"], "sf2_settings": r["settings"],
            "command": "sf2_run.py " + " ".join(map(str, command[2:]))}


def run_rlpar(overrides: list[str], seed: int, timeout_s: float) -> dict:
    """`python main.py OVERRIDES seed=S` as a user runs it, its metrics rows timed from the launch as
    they arrive (polled every 20 ms: the arrival times are, if anything, late)."""
    run = run_main_timed([*overrides, f"seed={seed}"], timeout_s=timeout_s)
    rows, process_s = run.rows, run.process_s
    if run.returncode != 0 or not rows:
        raise RuntimeError(f"rlpar {' '.join(overrides)} seed={seed} failed (exit {run.returncode}):\n{run.output[-2000:]}")
    curve = [(round(a, 3), r["env_steps"], r.get("episode_return_mean")) for r, a in zip(rows, run.arrivals)]
    reached = next(((t, s, ret) for t, s, ret in curve if ret is not None and ret >= THRESHOLD), None)
    return {"curve": curve, "reached": reached, "process_s": round(process_s, 3), "train_rows": rows,
            "command": "python main.py " + " ".join([*overrides, f"seed={seed}"])}


# -- figures from a curve of (s from launch, env steps, return mean) -------------------------------
def steady_rate(curve: list, warmup_s: float = 0.0) -> float | None:
    """Env steps per second from the first result at least `warmup_s` after the first one, to the last."""
    start = next((p for p in curve if p[0] >= curve[0][0] + warmup_s), None)
    last = curve[-1]
    if start is None or last[0] <= start[0]:
        return None
    return (last[1] - start[1]) / (last[0] - start[0])


def summarize(r: dict, warmup_s: float = 0.0) -> dict:
    curve = r["curve"]
    reached = r["reached"]
    last = curve[-1]
    return {"first_result_s": curve[0][0], "s_to_threshold": reached[0] if reached else None,
            "steps_to_threshold": reached[1] if reached else None, "steady_per_s": steady_rate(curve, warmup_s),
            "from_launch_per_s": last[1] / last[0], "final_steps": last[1], "final_return": last[2],
            "last_result_s": last[0]}


def measure(name: str, run, args) -> dict:
    load = wait_for_quiet(args.max_load, args.wait_s)
    print(f"== {name} (load {load:.2f})", flush=True)
    with LoadSampler() as sampler:
        try:
            r = run()
        except RuntimeError as err:
            print(f"   FAILED: {err}", flush=True)
            return {"error": str(err)[-1500:], "load_at_start": round(load, 2)}
    r.update(load_at_start=round(load, 2), load_during=round(statistics.mean(sampler.samples), 2) if sampler.samples else None)
    return r


# -- the two studies -------------------------------------------------------------------------------
def cartpole(args, python: Path) -> list[dict]:
    sides = ["sf2", *args.rlpar_algos]
    results = []
    for seed in args.seeds:
        for side in rotated(sides, seed):
            if side == "sf2":
                run = lambda: run_sf2(python, "cartpole", seed, args.cartpole_budget_s, SF2_CARTPOLE,  # noqa: E731
                                      SF2_CARTPOLE_LEARNING)
            else:
                run = lambda: run_rlpar(RLPAR_CARTPOLE[side], seed, args.timeout_s)  # noqa: E731
            r = measure(f"CartPole-v1 {side} seed {seed}", run, args)
            r.update(task="CartPole-v1", side=side, seed=seed)
            if "error" not in r:
                r.update(summarize(r))
                r.pop("train_rows", None)
                print(f"   475 at {fmt(r['s_to_threshold'], '.1f')} s from launch ({fmt(r['steps_to_threshold'], ',')} "
                      f"env steps), {fmt(r['steady_per_s'], ',.0f')} env steps/s, first result at "
                      f"{r['first_result_s']:.1f} s", flush=True)
            results.append(r)
    return results


def pong(args, python: Path) -> list[dict]:
    results = []
    for side in rotated(["rlpar", "sf2"], args.pong_order):
        if side == "sf2":
            run = lambda: run_sf2(python, "pong", 0, args.pong_budget_s, SF2_PONG, [])  # noqa: E731
        else:
            run = lambda: run_rlpar([*RLPAR_PONG, f"time_limit_s={args.pong_budget_s}"], 0,  # noqa: E731
                                    args.pong_budget_s + 180)
        r = measure(f"Pong {side}", run, args)
        r.update(task="ALE/Pong-v5", side="sf2" if side == "sf2" else "impala", seed=0)
        if "error" not in r:
            if side == "rlpar":  # rlpar counts agent steps; SF2 (summaries_use_frameskip) counts frames
                r["curve"] = [(t, steps * FRAME_SKIP, ret) for t, steps, ret in r["curve"]]
                r.pop("train_rows", None)
            r.update(summarize(r, args.warmup_s))
            print(f"   {fmt(r['steady_per_s'], ',.0f')} frames/s after {args.warmup_s:.0f} s of training, "
                  f"{r['from_launch_per_s']:,.0f} from launch, {r['final_steps']:,} frames", flush=True)
        results.append(r)
    return results


# -- tables and bars -------------------------------------------------------------------------------
def ok(results, task, side=None):
    return [r for r in results if r["task"] == task and "error" not in r and (side is None or r["side"] == side)]


def settings_table(python: Path, args) -> str:
    cart = " ".join(SF2_CARTPOLE_LEARNING + SF2_CARTPOLE["flags"])
    rows = [["CartPole-v1", "SF2 APPO", f"`{cart}`, torch threads {SF2_CARTPOLE['torch_threads']} (sf2_run.py)"]]
    rows += [["CartPole-v1", f"rlpar {a}", f"`python main.py {' '.join(RLPAR_CARTPOLE[a])}` (preset)"] for a in args.rlpar_algos]
    rows += [["ALE/Pong-v5", "SF2 APPO", f"SF2's Atari defaults + `{' '.join(SF2_PONG['flags'])}`, "
                                         f"{args.pong_budget_s:.0f} s of training"],
             ["ALE/Pong-v5", "rlpar impala", f"`python main.py {' '.join(RLPAR_PONG)} time_limit_s={args.pong_budget_s:g}`"]]
    return markdown_table(["task", "side", "settings"], rows)


def cartpole_table(results) -> str:
    rows = [[r["seed"], r["side"], fmt(r["s_to_threshold"], ".1f", "not reached"), fmt(r["steps_to_threshold"], ","),
             f"{r['first_result_s']:.1f}", fmt(r["steady_per_s"], ",.0f"), f"{r['from_launch_per_s']:,.0f}",
             f"{r['final_steps']:,}", fmt(r["final_return"], ".1f"), f"{r['load_at_start']} / {fmt(r['load_during'], '.1f')}"]
            for r in ok(results, "CartPole-v1")]
    rows += [[r["seed"], r["side"], "error", "", "", "", "", "", "", ""] for r in results
             if r["task"] == "CartPole-v1" and "error" in r]
    return markdown_table(["seed", "side", "s to 475 from launch", "env steps to 475", "first result s",
                           "env steps/s (first result to last)", "env steps/s from launch", "env steps run",
                           "return at end", "load at start / during"], rows)


def pong_table(results, warmup_s) -> str:
    rows = [[r["side"], fmt(r["steady_per_s"], ",.0f"), f"{r['from_launch_per_s']:,.0f}", f"{r['first_result_s']:.1f}",
             f"{r['last_result_s']:.1f}", f"{r['final_steps']:,}", f"{r['load_at_start']} / {fmt(r['load_during'], '.1f')}"]
            for r in ok(results, "ALE/Pong-v5")]
    return markdown_table(["side", f"frames/s after {warmup_s:.0f} s of training", "frames/s from launch",
                           "first result s", "last result s", "frames", "load at start / during"], rows)


def bars(results, args) -> list[tuple[str, bool | None, str]]:
    out = []
    sf2 = {r["seed"]: r for r in ok(results, "CartPole-v1", "sf2")}
    # SF2's time to 475, or its whole budget when it did not get there (a lower bound, in its favour)
    sf2_time = {s: (r["s_to_threshold"] if r["s_to_threshold"] is not None else r["last_result_s"]) for s, r in sf2.items()}
    best, best_mean = None, None
    for algo in args.rlpar_algos:
        runs = {r["seed"]: r for r in ok(results, "CartPole-v1", algo)}
        if len(runs) == len(args.seeds) and all(r["s_to_threshold"] is not None for r in runs.values()):
            mean = statistics.mean(r["s_to_threshold"] for r in runs.values())
            if best_mean is None or mean < best_mean:
                best, best_mean = algo, mean
    if best is None or len(sf2) < len(args.seeds):
        out.append(("rlpar's best reaches 475 in <= 1/3 of SF2's time, every seed", None, "missing runs"))
    else:
        runs = {r["seed"]: r for r in ok(results, "CartPole-v1", best)}
        ratios = {s: runs[s]["s_to_threshold"] / sf2_time[s] for s in args.seeds}
        out.append((f"rlpar's best ({best}) reaches 475 in <= 1/3 of SF2's time from launch, every seed",
                    all(x <= 1 / 3 for x in ratios.values()),
                    ", ".join(f"seed {s}: {runs[s]['s_to_threshold']:.1f} / {sf2_time[s]:.1f} s = {x:.3f}"
                              + ("" if sf2[s]["s_to_threshold"] is not None else " (SF2 not reached: its budget)")
                              for s, x in ratios.items())))
    impala = [r["steady_per_s"] for r in ok(results, "CartPole-v1", "impala") if r["steady_per_s"]]
    sf2_fps = [r["steady_per_s"] for r in sf2.values() if r["steady_per_s"]]
    if impala and sf2_fps:
        ratio = statistics.mean(impala) / statistics.mean(sf2_fps)
        out.append(("rlpar IMPALA's CartPole env steps/s >= 3x SF2's", ratio >= 3,
                    f"{statistics.mean(impala):,.0f} / {statistics.mean(sf2_fps):,.0f} = {ratio:.1f}x (means over seeds)"))
    else:
        out.append(("rlpar IMPALA's CartPole env steps/s >= 3x SF2's", None, "missing runs"))
    rl, sf = ok(results, "ALE/Pong-v5", "impala"), ok(results, "ALE/Pong-v5", "sf2")
    if rl and sf and rl[0]["steady_per_s"] and sf[0]["steady_per_s"]:
        ratio = rl[0]["steady_per_s"] / sf[0]["steady_per_s"]
        launch = rl[0]["from_launch_per_s"] / sf[0]["from_launch_per_s"]
        out.append(("rlpar's Pong frames/s (IMPALA, distributed) >= 3x SF2's", ratio >= 3,
                    f"{rl[0]['steady_per_s']:,.0f} / {sf[0]['steady_per_s']:,.0f} = {ratio:.1f}x steady state "
                    f"({launch:.1f}x from launch)"))
    else:
        out.append(("rlpar's Pong frames/s (IMPALA, distributed) >= 3x SF2's", None, "missing runs"))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke check: seed 0, 30 s of Pong, 60 s SF2 CartPole budget")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--rlpar-algos", nargs="+", choices=list(RLPAR_CARTPOLE), default=list(RLPAR_CARTPOLE))
    p.add_argument("--tasks", nargs="+", choices=["cartpole", "pong"], default=["cartpole", "pong"])
    p.add_argument("--cartpole-budget-s", type=float, default=120.0, help="SF2: seconds of training at most")
    p.add_argument("--pong-budget-s", type=float, default=60.0, help="seconds of training of each Pong run")
    p.add_argument("--warmup-s", type=float, default=15.0, help="Pong: training seconds left out of the steady rate")
    p.add_argument("--pong-order", type=int, default=0, help="0: rlpar first, 1: SF2 first")
    p.add_argument("--timeout-s", type=float, default=300.0, help="rlpar CartPole: kill a run after this long")
    p.add_argument("--max-load", type=float, default=1.5)
    p.add_argument("--wait-s", type=float, default=30.0)
    p.add_argument("--sf2-python", help=f"SF2's interpreter (default: {SF2_VENV}, built if missing)")
    p.add_argument("--out", help="write every result (curves included) to this JSON file")
    args = p.parse_args()
    if args.quick:
        args.seeds, args.pong_budget_s, args.warmup_s, args.cartpole_budget_s = [0], 30.0, 10.0, 60.0
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # rlpar's Ray on 127.0.0.1 (inherited by main.py)
    python = sf2_python(args.sf2_python)
    print(f"# {machine()}", flush=True)
    results = []
    if "cartpole" in args.tasks:
        results += cartpole(args, python)
    if "pong" in args.tasks:
        results += pong(args, python)
    print("\nSettings:\n\n" + settings_table(python, args))
    if "cartpole" in args.tasks:
        print("\nCartPole-v1 (475 = the episode-return mean each library reports, last 20 episodes):\n\n"
              + cartpole_table(results))
    if "pong" in args.tasks:
        print(f"\nALE/Pong-v5, frames = agent steps x {FRAME_SKIP}:\n\n" + pong_table(results, args.warmup_s))
    print("\nBars:")
    for name, held, detail in bars(results, args):
        print(f"  [{'HOLDS' if held else 'n/a' if held is None else 'FAILS'}] {name}: {detail}")
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine(), "args": vars(args), "results": results,
                                              "bars": bars(results, args)}, indent=1))
        print(f"\nall results: {args.out}")


if __name__ == "__main__":
    main()
