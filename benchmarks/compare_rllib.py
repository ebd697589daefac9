"""CartPole-v1 on Ray: rlpar's PPO, IMPALA and APPO (`parallel=distributed`) against RLlib's.

RLlib needs its own environment (it pins its own Gymnasium), e.g.

    python3 -m venv /tmp/rllib_venv && /tmp/rllib_venv/bin/pip install torch==2.13.0 "ray[rllib]==2.60.0"

One side, one algorithm, one seed at a time (prints a `RESULT {json}` line):

    /tmp/rllib_venv/bin/python benchmarks/compare_rllib.py rllib --algo impala --seed 0
    .venv/bin/python benchmarks/compare_rllib.py rlpar --algo impala --seed 0

Both sides, one after the other, alternating, and a table at the end:

    .venv/bin/python benchmarks/compare_rllib.py driver --algos impala appo --seeds 0 1 2
    .venv/bin/python benchmarks/compare_rllib.py driver --algos ppo --workers 2 --seeds 0   # throughput, 2 runners
    .venv/bin/python benchmarks/compare_rllib.py driver --algos ppo --workers 2 --seeds 0 1 2 --until-steps 100000
        # a 100k-step run on each side, env steps/s counted from launch

RLlib side: the new API stack, `--workers` env runners (default 4), the hyper-parameters of RLlib's
own tuned examples `rllib/tuned_examples/impala/cartpole_impala.py` and
`rllib/tuned_examples/appo/cartpole_appo.py` (PPO: RLlib's defaults, 4 envs per runner, batches of 4,000),
on a private Ray instance (`num_cpus=2`, 256 MB object store, dashboard off, 127.0.0.1). It trains
until `env_runners/episode_return_mean` reaches the threshold or the time budget (seconds of
training, counted from the first `algo.train()` call) runs out. The tuned examples' Tune runs
give every env runner and the learner a whole CPU; 4 runners and a learner do not fit in the 2
CPUs of this instance, so the runners get a fraction of one (`--cpus-per-env-runner`).

rlpar side: exactly `python main.py algo=<algo> parallel=distributed workers=<workers> seed=S
total_steps=300000`, plus `progress=false run_dir=<temp folder>`, as a subprocess; its
metrics.jsonl is read while it grows (to time its first row against the process start) and at
the end.

Clocks, the same for both: "start-up" is seconds from launching the process to its first result
(RLlib: first `train()` return; rlpar: first metrics row); "train s" is seconds from the first
training call (RLlib: `algo.train()`; rlpar: `wall_time_s`, which starts with the first iteration);
"env steps/s" counts sampled env steps after the first result, over the time after it.
Before each measured run the driver waits until the 1-minute load average is under 1.0 or 120 s
have passed, and records the load it started at.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import LoadSampler, fmt, report, result_of, run_main_timed, wait_for_quiet

T0 = float(os.environ.get("BENCH_T0", time.time()))  # the launch time, when the driver started us
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray node on 127.0.0.1
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

THIS = Path(__file__).resolve()
THRESHOLD = 475.0
RLLIB_PYTHON = "/tmp/rllib_venv/bin/python"
RLPAR_PYTHON = sys.executable


# -- RLlib -------------------------------------------------------------------------------------
def rllib_config(algo: str, seed: int, args):
    """The tuned example's settings for CartPole-v1, with 4 env runners and this machine's CPUs."""
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    if algo == "ppo":
        from ray.rllib.algorithms.ppo import PPOConfig

        config = PPOConfig().training(train_batch_size_per_learner=4000)
    elif algo == "impala":
        from ray.rllib.algorithms.impala import IMPALAConfig

        # rllib/tuned_examples/impala/cartpole_impala.py (one learner: lr factor sqrt(1) = 1)
        config = IMPALAConfig().training(
            train_batch_size_per_learner=500,
            grad_clip=40.0,
            grad_clip_by="global_norm",
            lr=0.0005,
            vf_loss_coeff=0.05,
            entropy_coeff=0.0,
        )
    else:
        from ray.rllib.algorithms.appo import APPOConfig

        # rllib/tuned_examples/appo/cartpole_appo.py
        config = APPOConfig().training(
            circular_buffer_iterations_per_batch=2,
            vf_loss_coeff=0.05,
            entropy_coeff=0.0,
        )
    config = (
        config.api_stack(enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True)
        .environment("CartPole-v1")
        .rl_module(model_config=DefaultModelConfig(vf_share_layers=True))
        .env_runners(num_env_runners=args.workers, num_cpus_per_env_runner=args.cpus_per_env_runner,
                     num_envs_per_env_runner=4 if algo == "ppo" else 1)
        .learners(num_learners=args.num_learners)
        .debugging(seed=seed)
        # Reporting only: the same 20-episode window as rlpar's episode_return_mean
        # (RLlib's default is 100, which lags the policy more).
        .reporting(metrics_num_episodes_for_smoothing=args.return_window)
    )
    if args.min_iter_s is not None:
        config = config.reporting(min_time_s_per_iteration=args.min_iter_s)
    return config


def _get(result: dict, key: str):
    if key in result.get("env_runners", {}):
        return result["env_runners"][key]
    return result.get(key)


def run_rllib(args) -> dict:
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             object_store_memory=256 * 2**20, log_to_driver=False)
    algo = rllib_config(args.algo, args.seed, args).build_algo()
    built = time.time()
    curve = []  # (train s, process s, env steps sampled, return mean)
    first = reached = None
    while True:
        result = algo.train()
        now = time.time()
        steps = int(_get(result, "num_env_steps_sampled_lifetime") or 0)
        ret = _get(result, "episode_return_mean")
        curve.append((round(now - built, 3), round(now - T0, 3), steps, ret))
        print(f"  train {now - built:6.1f} s  steps {steps:>9,}  return {ret}", flush=True)
        first = first or curve[-1]
        if reached is None and ret is not None and ret >= THRESHOLD:
            reached = curve[-1]
            if not args.until_steps:
                break
        if args.until_steps and steps >= args.until_steps:
            break
        if now - built >= args.budget_s:
            break
    algo.stop()
    ray.shutdown()
    last = curve[-1]
    span = last[0] - first[0]
    return {
        "side": "rllib", "algo": args.algo, "seed": args.seed,
        "startup_s": first[1],
        "build_s": round(built - T0, 3),
        "fps_after_first": (last[2] - first[2]) / span if span > 0 else None,
        "fps_overall": last[2] / last[0],
        "fps_from_launch": last[2] / last[1],
        "reached": reached is not None,
        "train_s_to_threshold": reached[0] if reached else None,
        "process_s_to_threshold": reached[1] if reached else None,
        "steps_to_threshold": reached[2] if reached else None,
        "budget_s": args.budget_s,
        "final_return": last[3], "final_steps": last[2], "final_train_s": last[0],
        "process_s": round(time.time() - T0, 3),
        "curve": curve,
        "settings": {"cpus_per_env_runner": args.cpus_per_env_runner, "num_learners": args.num_learners,
                     "return_window": args.return_window, "min_iter_s": args.min_iter_s},
    }


# -- rlpar -------------------------------------------------------------------------------------
def rlpar_command(algo: str, seed: int, total_steps: int, workers: int) -> list[str]:
    return ["main.py", f"algo={algo}", "parallel=distributed", f"workers={workers}", f"seed={seed}",
            f"total_steps={total_steps}"]


def run_rlpar(args) -> dict:
    command = rlpar_command(args.algo, args.seed, args.total_steps, args.workers)[1:]  # after main.py
    run = run_main_timed(command, python=args.rlpar_python, timeout_s=args.timeout_s, poll_s=0.05,
                         env=dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"))
    rows, arrivals, process_s, output = run.rows, run.arrivals, run.process_s, run.output
    out = {
        "side": "rlpar", "algo": args.algo, "seed": args.seed, "returncode": run.returncode,
        "command": " ".join(["python", *rlpar_command(args.algo, args.seed, args.total_steps, args.workers)]),
        "process_s": round(process_s, 3),
    }
    if run.returncode != 0 or not rows:
        out["error"] = output[-3000:]
        return out
    first, last = rows[0], rows[-1]
    hit = next((i for i, r in enumerate(rows)
                if r.get("episode_return_mean") is not None and r["episode_return_mean"] >= THRESHOLD), None)
    span = last["wall_time_s"] - first["wall_time_s"]
    out.update({
        "startup_s": round(arrivals[0], 3),
        "fps_after_first": (last["env_steps"] - first["env_steps"]) / span if span > 0 else None,
        "fps_overall": last["env_steps"] / last["wall_time_s"],
        "fps_from_launch": last["env_steps"] / arrivals[-1],
        "reached": hit is not None,
        "train_s_to_threshold": rows[hit]["wall_time_s"] if hit is not None else None,
        "process_s_to_threshold": round(arrivals[hit], 3) if hit is not None else None,
        "steps_to_threshold": rows[hit]["env_steps"] if hit is not None else None,
        "final_return": last["episode_return_mean"], "final_steps": last["env_steps"],
        "final_train_s": last["wall_time_s"],
        "iterations": len(rows),
        "curve": [(r["wall_time_s"], round(a, 3), r["env_steps"], r["episode_return_mean"])
                  for r, a in zip(rows, arrivals)][:: max(1, len(rows) // 200)] + [
                  (last["wall_time_s"], round(arrivals[-1], 3), last["env_steps"], last["episode_return_mean"])],
        "preset_line": next((line for line in output.splitlines() if "preset" in line.lower()), None),
    })
    return out


# -- driver ------------------------------------------------------------------------------------
def wait_for_load(max_wait_s: float, below: float) -> dict:
    start_load, start = os.getloadavg()[0], time.time()
    load = wait_for_quiet(below, max_wait_s)
    print(f"  starting after {time.time() - start:.0f} s at load {load:.2f}", flush=True)
    return {"load_at_wait": round(start_load, 2), "waited_s": round(time.time() - start, 1),
            "load_at_start": round(load, 2)}


def run_child(side: str, algo: str, seed: int, args) -> dict:
    if side == "rllib":
        cmd = [args.rllib_python, str(THIS), "rllib", "--algo", algo, "--seed", str(seed), "--workers", str(args.workers),
               "--budget-s", str(args.budget_s), "--cpus-per-env-runner", str(args.cpus_per_env_runner),
               "--num-learners", str(args.num_learners), "--return-window", str(args.return_window),
               "--until-steps", str(args.until_steps)]
        if args.min_iter_s is not None:
            cmd += ["--min-iter-s", str(args.min_iter_s)]
    else:
        cmd = [sys.executable, str(THIS), "rlpar", "--algo", algo, "--seed", str(seed), "--workers", str(args.workers),
               "--total-steps", str(args.until_steps or args.total_steps), "--rlpar-python", args.rlpar_python]
    try:
        return result_of(cmd, env=dict(os.environ, BENCH_T0=repr(time.time())))
    except RuntimeError as err:
        return {"side": side, "algo": algo, "seed": seed, "error": str(err)}


def _fmt(x, spec=",.0f"):
    return fmt(x, spec)


def return_at(curve, t):
    """The return mean of the last result at or before t seconds of training."""
    best = None
    for train_s, _, _, ret in curve:
        if train_s <= t:
            best = ret
    return best


def table(results: list[dict], budget_s: float) -> str:
    lines = ["| algo | side | seed | start-up s | env steps/s after first result | env steps/s overall "
             "| env steps/s from launch | 475 reached at (train s / process s / env steps) "
             "| return at end (train s, env steps) | load before / mean during |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['algo']} | {r['side']} | {r['seed']} | error (exit {r.get('returncode')}) "
                         f"| | | | | | {r.get('load_at_start', '-')} / - |")
            continue
        hit = (f"{r['train_s_to_threshold']:.1f} / {r['process_s_to_threshold']:.1f} / {r['steps_to_threshold']:,}"
               if r["reached"] else f"not reached in {r.get('budget_s', budget_s):.0f} s")
        load_during = statistics.mean(r["load_during"]) if r.get("load_during") else None
        lines.append(
            f"| {r['algo']} | {r['side']} | {r['seed']} | {r['startup_s']:.1f} | {_fmt(r['fps_after_first'])} "
            f"| {_fmt(r['fps_overall'])} | {_fmt(r.get('fps_from_launch'))} | {hit} | {_fmt(r['final_return'], '.1f')} "
            f"({r['final_train_s']:.1f} s, {r['final_steps']:,}) "
            f"| {r.get('load_at_start', '-')} / {_fmt(load_during, '.2f')} |")
    return "\n".join(lines)


def ratios(results: list[dict], budget_s: float) -> str:
    out = []
    for algo in sorted({r["algo"] for r in results}):
        ok = lambda side: [r for r in results if r["algo"] == algo and r["side"] == side and "error" not in r]  # noqa: E731
        rl, rp = ok("rllib"), ok("rlpar")
        if not rl or not rp:
            out.append(f"{algo}: no ratio (a side has no successful run)")
            continue
        rl_fps = statistics.mean(r["fps_after_first"] for r in rl)
        rl_launch = statistics.mean(r["fps_from_launch"] for r in rl)
        out.append(f"{algo}: env steps/s from launch, rlpar/RLlib = "
                   + ", ".join(f"seed {r['seed']}: {r['fps_from_launch'] / rl_launch:.1f}x" for r in rp)
                   + f" (RLlib mean {rl_launch:,.0f}/s over {len(rl)} run(s))")
        out.append(f"{algo}: env steps/s after the first result, rlpar/RLlib = "
                   + ", ".join(f"seed {r['seed']}: {r['fps_after_first'] / rl_fps:.1f}x" for r in rp)
                   + f" (RLlib mean {rl_fps:,.0f}/s over {len(rl)} run(s))")
        rl_time = [r["train_s_to_threshold"] if r["reached"] else r["budget_s"] for r in rl]
        rl_ref = statistics.mean(rl_time)
        what = ("RLlib's time to 475" if all(r["reached"] for r in rl)
                else "the training time RLlib had (it did not reach 475 in every run)")
        parts = []
        for r in rp:
            if r["reached"]:
                parts.append(f"seed {r['seed']}: {r['train_s_to_threshold']:.1f} s train "
                             f"({r['train_s_to_threshold'] / rl_ref:.3f}), {r['process_s_to_threshold']:.1f} s "
                             f"from launch ({r['process_s_to_threshold'] / rl_ref:.3f})")
            else:
                parts.append(f"seed {r['seed']}: not reached (ended at {r['final_return']})")
        out.append(f"{algo}: rlpar time to 475 / {what} ({rl_ref:.1f} s): " + "; ".join(parts))
    return "\n".join(out)


def returns_over_time(results: list[dict]) -> str:
    marks = [2, 5, 10, 20, 30, 60, 120, 180, 240]
    lines = ["| algo | side | seed | " + " | ".join(f"{m} s" for m in marks) + " |",
             "|---|---|---|" + "---|" * len(marks)]
    for r in results:
        if "error" in r:
            continue
        done = "(475)" if r["reached"] and r["side"] == "rllib" else "(ended)"
        cells = [_fmt(return_at(r["curve"], m), ".1f") if m <= r["final_train_s"] else done for m in marks]
        lines.append(f"| {r['algo']} | {r['side']} | {r['seed']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def driver(args) -> None:
    results = []
    sides = [s for s in ("rllib", "rlpar") if s in args.sides]
    for algo in args.algos:
        for seed in args.seeds:
            for side in sides:
                if side == "rllib" and seed not in args.rllib_seeds:
                    continue
                print(f"== {side} {algo} seed {seed}", flush=True)
                load = wait_for_load(args.max_wait_s, args.load_below)
                with LoadSampler() as sampler:
                    r = run_child(side, algo, seed, args)
                r.update(load, load_during=[round(x, 2) for x in sampler.samples])
                results.append(r)
                if "error" in r:
                    print(f"  FAILED (exit {r.get('returncode')}):\n{r['error']}", flush=True)
                else:
                    print(f"  start-up {r['startup_s']:.1f} s, {r['fps_after_first']:,.0f} env steps/s, "
                          f"475 at {r['train_s_to_threshold']} s train, final return {r['final_return']} "
                          f"after {r['final_train_s']:.1f} s ({r['final_steps']:,} steps)", flush=True)
                Path(args.json).write_text(json.dumps(results, indent=1))
    print()
    print(table(results, args.budget_s))
    print()
    print(ratios(results, args.budget_s))
    print()
    print(returns_over_time(results))
    print(f"\nall results: {args.json}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["rllib", "rlpar", "driver"])
    p.add_argument("--algo", choices=["ppo", "impala", "appo"], default="impala")
    p.add_argument("--workers", type=int, default=4, help="env runners on both sides")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--algos", nargs="+", default=["impala", "appo"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--rllib-seeds", nargs="+", type=int, default=[0, 1, 2],
                   help="driver: the seeds RLlib is run with (each costs up to the budget)")
    p.add_argument("--sides", nargs="+", default=["rllib", "rlpar"])
    p.add_argument("--budget-s", type=float, default=240.0, help="RLlib: seconds of training at most")
    p.add_argument("--cpus-per-env-runner", type=float, default=0.25)
    p.add_argument("--num-learners", type=int, default=1, help="RLlib: 0 is a learner in the driver")
    p.add_argument("--return-window", type=int, default=20, help="RLlib: episodes in episode_return_mean")
    p.add_argument("--min-iter-s", type=float, default=None,
                   help="RLlib: min_time_s_per_iteration (default: the algorithm's own, 10 s)")
    p.add_argument("--total-steps", type=int, default=300_000, help="rlpar: total_steps")
    p.add_argument("--until-steps", type=int, default=0,
                   help="both sides train this many env steps, past 475 (0: RLlib stops at 475); the table's "
                        "'from launch' column is env steps over seconds from launching the process")
    p.add_argument("--timeout-s", type=float, default=900.0, help="rlpar: kill the run after this long")
    p.add_argument("--rllib-python", default=RLLIB_PYTHON)
    p.add_argument("--rlpar-python", default=RLPAR_PYTHON)
    p.add_argument("--max-wait-s", type=float, default=120.0)
    p.add_argument("--load-below", type=float, default=1.0)
    p.add_argument("--json", default=str(Path(tempfile.gettempdir()) / "compare_rllib.json"))
    args = p.parse_args()
    if args.mode == "driver":
        driver(args)
        return
    report(run_rllib(args) if args.mode == "rllib" else run_rlpar(args))


if __name__ == "__main__":
    main()
