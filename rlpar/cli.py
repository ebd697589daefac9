"""The `rlpar` command (installed with the package; `python -m rlpar` is the same):

    rlpar train [group=option ...] [key=value ...]   # exactly `python main.py ...` (Hydra)
    rlpar config [group=option ...] [key=value ...]  # the config that would run, validated and resolved (--unresolved)
    rlpar evaluate RUN_DIR [--episodes N] [--video/--no-video] [--seed S] [--stochastic] [--opponent WHO] [--trust]
    rlpar report DIR [--out DIR] [--threshold ENV=VALUE] [--benchmark]
    rlpar export RUN_DIR --format onnx|torchscript --out FILE [--checkpoint C] [--trust]
    rlpar serve RUN_DIR [--host H] [--port P] [--token T] [--checkpoint C] [--stochastic] [--trust]

Only the standard library and rlpar.interrupts are imported before a command starts: a
signal during the slow imports that follow (torch, Ray, Hydra) exits 130 at once, as main.py's did.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
from pathlib import Path
from typing import cast

from rlpar import interrupts
from rlpar.logging import startup

LOADER_THREAD = "rlpar-import"
COMMANDS = ("train", "config", "evaluate", "report", "export", "serve")

HELP = """usage: rlpar COMMAND [ARGS...]

Parallel and distributed reinforcement learning on Ray, PyTorch and Gymnasium.

commands:
  train [OVERRIDES...]   train with Hydra overrides, e.g. `rlpar train env=pendulum seed=1`;
                         the same as `python main.py ...` (`rlpar train --help`: the config)
  config [OVERRIDES...]  print the config those overrides run, presets included, validated
                         (exit 2 with its problems) and resolved; --unresolved shows the
                         interpolations (`python main.py ... --cfg job`)
  evaluate RUN_DIR       the deterministic policy of a run's newest checkpoint: returns, eval
                         metrics and a video in RUN_DIR/videos/ (`rlpar evaluate --help`)
  report DIR             report.md, results.csv and plots from a sweep or a search
  export RUN_DIR         the policy as an ONNX or TorchScript file, preprocessing and action
                         mapping inside, with a JSON description (`rlpar export --help`)
  serve RUN_DIR          the policy over HTTP: POST /act, GET / (`rlpar serve --help`)

options:
  -h, --help             this help
  --version              rlpar's version

Configs are read from {conf_dir}; outputs go under the current directory.
"""


def main(argv: list[str] | None = None) -> int:
    """The console entry point: returns the exit status (or leaves through SystemExit)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        from rlpar.config.conf_dir import CONF_DIR

        print(HELP.format(conf_dir=CONF_DIR), end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, args = argv[0], argv[1:]
    if command in ("--version", "-V"):
        from rlpar import __version__

        print(f"rlpar {__version__}")
        return 0
    if command == "train":
        interrupts.exit_at_once_on_signals()  # before any slow import
        train(args)
        return 0
    if command == "config":
        interrupts.exit_at_once_on_signals()
        show_config(args)
        return 0
    if command == "evaluate":
        return evaluate(args)
    if command == "report":
        return report(args)
    if command == "export":
        return export(args)
    if command == "serve":
        return serve(args)
    hint = f"; to train with it: rlpar train {' '.join(argv)}" if "=" in command else ""
    print(f"rlpar: unknown command '{command}' (commands: {', '.join(COMMANDS)}; rlpar --help){hint}", file=sys.stderr)
    return 2


# -- train: `python main.py ...` ---------------------------------------------------------------
def train(argv: list[str]) -> None:
    """Train with Hydra overrides `argv`, from any directory (the configs are found by absolute
    path). The caller has called interrupts.exit_at_once_on_signals() before its imports. Ends by
    returning (exit 0), raising SystemExit, or leaving at once with os._exit (see
    `_leave_past_background_torch`)."""
    _import_from_launch_dir()
    sys.argv = [sys.argv[0], *_hydra_argv(argv)]  # Hydra reads its overrides and flags (-m, --cfg) there
    exit_code: str | int | None = 0  # SystemExit's code
    try:
        try:
            _hydra_main()()
            if interrupts.interrupted():  # a signal during the final clean-up, which it did not cut short
                _exit_interrupted()
        except KeyboardInterrupt:  # one raised outside run_job's own handling: in Hydra, or its last lines
            interrupts.stop_under_way()
            _stop_private_ray()
            _exit_interrupted()
    except SystemExit as exit_:
        exit_code = exit_.code
        raise
    finally:
        interrupts.ignore_signals()
        _leave_past_background_torch(exit_code)


def _import_from_launch_dir() -> None:
    """`env.entry_point=my_env:MyEnv` is found in the directory the command started in, also by
    workers and Tune trials, and so is a `_target_` of the user's own (`algo=theirs` naming `my_algo.MyAlgo`)."""
    from rlpar.envs.factory import LAUNCH_DIR_VARIABLE, add_import_dir

    os.environ.setdefault(LAUNCH_DIR_VARIABLE, os.getcwd())
    add_import_dir(os.environ[LAUNCH_DIR_VARIABLE])


_preset_chosen_by_user = False  # `preset=...` on the command line: no job's preset is chosen for it


def _hydra_argv(argv: list[str]) -> list[str]:
    """Hydra's flags as given; the overrides checked (Hydra would answer some with a traceback)
    and completed with the preset of the (algo.name, env.id) they compose to."""
    global _preset_chosen_by_user
    from hydra._internal.utils import get_args_parser

    from rlpar.config.overrides import override_problems
    from rlpar.config.presets import chooses_preset

    args = get_args_parser().parse_args(argv)
    if (
        args.shell_completion or args.hydra_help or args.config_name or args.config_path
    ):  # Hydra's own, or another config
        return argv
    if problems := override_problems(args.overrides):
        _refuse(problems)
    _preset_chosen_by_user = chooses_preset(args.overrides)
    flags = list(argv)
    for override in args.overrides:
        flags.remove(override)
    return [*_composed_overrides(args.overrides), *flags]  # flags last: `--info` takes an optional value


def _composed_overrides(overrides: list[str]) -> list[str]:
    from hydra import compose, initialize_config_dir

    from rlpar.config.conf_dir import CONF_DIR
    from rlpar.config.presets import with_preset

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return with_preset(overrides, lambda composing: compose(config_name="config", overrides=composing))
    except Exception:  # anything else wrong with the command: Hydra reports it in its own words
        return overrides


def _job_preset(cfg, hydra, overrides: list[str]):
    """(the job's config, its preset line). A job of a sweep over `algo` or `env.id` composed
    with the preset of the command's first (algo.name, env.id) is composed again with its own."""
    from hydra import compose

    from rlpar.config.presets import GROUP, preset_line, preset_override, wanted_preset, without_preset

    chosen, wanted = hydra.runtime.choices.get(GROUP), wanted_preset(cfg)
    if not _preset_chosen_by_user and chosen != wanted:
        kept = without_preset(overrides)
        searchpath = [o for o in hydra.overrides.hydra if o.startswith("hydra.searchpath")]  # a user's own configs
        cfg = compose(
            config_name="config", overrides=[*searchpath, *kept, *([preset_override(wanted)] if wanted else [])]
        )
        chosen = wanted
    return cfg, preset_line(cfg, chosen)


def _hydra_main():
    import hydra

    from rlpar.config.conf_dir import CONF_DIR

    return hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(run_job)


def run_job(cfg) -> float | None:
    """One Hydra job (a run, a sweep's trial, or a Ray Tune search)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from rlpar.config.validate import ConfigError, validate_config
    from rlpar.errors import first_line
    from rlpar.runtime import run_lock
    from rlpar.runtime.errors import TRAINING_STOPS
    from rlpar.runtime.resume import config_for_resume

    interrupts.stop_on_signals()  # SIGTERM: the same clean stop as Ctrl-C
    startup.mark("python, imports and composing the config" if startup.start_job() else "composing the config")
    hydra_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        preset = None
        overrides: list[str] = []
        if cfg.get("resume"):
            cfg = config_for_resume(cfg)  # the run's own config: its preset was applied when it started
        else:
            hydra = HydraConfig.get()
            overrides = cast(
                list[str], OmegaConf.to_container(hydra.overrides.task, resolve=False)
            )  # `x=${y}` as typed
            cfg, preset = _job_preset(cfg, hydra, overrides)
            if not _preset_chosen_by_user:  # the rerun command of a search's best trial names what the user typed
                from rlpar.config.presets import without_preset

                overrides = without_preset(overrides)
        new_run = not cfg.get("resume")
        if problem := _run_dir_refusal(cfg, new_run=new_run):  # at once, before the slower validation
            raise run_lock.RunDirInUseError(problem)
        env_probe = validate_config(cfg)  # every problem at once, before anything slow is imported or started
        startup.mark("validating it")
        run_lock.acquire(cfg.run_dir, new_run=new_run)  # before Ray boots
        if Path(cfg.run_dir).resolve() != hydra_dir.resolve():
            _remove_if_empty(hydra_dir)  # now: a run killed later must not leave Hydra's empty folder behind
        if preset:
            print(preset, flush=True)
        if cfg.get("search"):
            from rlpar.search.tune_search import run_search

            best = run_search(cfg, overrides=overrides)
            return best.get("final")
        _load_rlpar_while_ray_starts(cfg)
        from rlpar.runtime.run import run

        startup.mark("importing torch and the trainer (and booting Ray, for a private instance)")

        final = run(cfg, validated=True, env_probe=env_probe)
    except ConfigError as err:
        _refuse(err.problems)
    except run_lock.RunDirInUseError as err:
        print(f"rlpar: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        _exit_interrupted()
    except TRAINING_STOPS as err:
        print(f"rlpar: training stopped: {err}", file=sys.stderr)
        sys.exit(3)
    except Exception as err:  # a bug, or an environment failing in a way rlpar cannot train through
        where = "".join(f"; {note}" for note in getattr(err, "__notes__", []))
        print(f"rlpar: training failed: {type(err).__name__}: {first_line(err)}{where}", file=sys.stderr)
        sys.exit(3)
    finally:
        interrupts.stop_under_way()  # however it ends, nothing cuts the clean-up short
        _stop_private_ray()
        run_lock.release_all()
        _remove_if_empty(hydra_dir)
    return final.get("episode_return_mean")


def _run_dir_refusal(cfg, *, new_run: bool) -> str | None:
    from omegaconf.errors import OmegaConfBaseException

    from rlpar.runtime import run_lock

    try:
        run_dir = cfg.run_dir
    except OmegaConfBaseException:  # validation names it
        return None
    return run_lock.refusal(run_dir, new_run=new_run) if isinstance(run_dir, str) and run_dir else None


def _exit_interrupted() -> None:
    interrupts.stop_under_way()  # first: from here on signals are only noted
    print("rlpar: interrupted", file=sys.stderr, flush=True)
    sys.exit(interrupts.INTERRUPTED_EXIT_CODE)


def _stop_private_ray() -> None:
    """The private Ray instance and all its processes, also when a signal came before any
    sampler adopted it (a no-op when none runs)."""
    if "rlpar.cluster.connection" in sys.modules:
        sys.modules["rlpar.cluster.connection"].stop_private_instance()


def _refuse(problems: list[str]) -> None:
    """One problem, one line; several, one line each under a heading."""
    text = problems[0] if len(problems) == 1 else "\n  " + "\n  ".join(problems)
    print(f"rlpar: invalid config: {text}", file=sys.stderr)
    sys.exit(2)


def _remove_if_empty(hydra_dir: Path) -> None:
    """Hydra creates its output folder before rlpar runs: gone again if the run refused to start,
    or wrote elsewhere (`run_dir=...`). Its date folder and outputs/ go too, if left empty."""
    for folder in (hydra_dir, hydra_dir.parent, hydra_dir.parent.parent):
        try:
            os.rmdir(folder)
        except OSError:  # not empty (a run's files, other runs), or already gone
            return


def _load_rlpar_while_ray_starts(cfg) -> None:
    """For a private Ray instance: import torch and the trainer in a thread while Ray boots."""
    if cfg.parallel.get("name") != "distributed" or cfg.ray.address:
        return
    from rlpar.cluster.connection import start_private_instance_early

    loader = threading.Thread(
        target=importlib.import_module, args=("rlpar.runtime.run",), daemon=True, name=LOADER_THREAD
    )
    loader.start()
    start_private_instance_early(num_cpus=cfg.ray.num_cpus, object_store_mb=cfg.ray.object_store_mb)
    loader.join()


def _leave_past_background_torch(code) -> None:
    """A run that ends while the import of rlpar's trainer still runs in a thread (Ray booted
    meanwhile, and the run was interrupted twice) leaves at once, everything else being closed:
    the interpreter's normal shutdown would tear torch down under that import."""
    importing = any(thread.name == LOADER_THREAD and thread.is_alive() for thread in threading.enumerate())
    if importing:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else int(code is not None))


# -- config ------------------------------------------------------------------------------------
UNRESOLVED = "--unresolved"


def show_config(argv: list[str]) -> None:
    """`rlpar config`: the config `rlpar train argv` would run, refused as training would refuse
    it (its problems, one line each, exit 2), else printed resolved (`--unresolved`: with its
    interpolations, as `python main.py ... --cfg job`)."""
    unresolved = UNRESOLVED in argv
    argv = [arg for arg in argv if arg != UNRESOLVED]
    if sweep := next((arg for arg in argv if arg in ("-m", "--multirun")), None):
        print(
            f"rlpar config: {sweep}: a sweep runs one config per job; print one job's with its overrides "
            f"(rlpar config algo=dqn seed=1)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    _import_from_launch_dir()  # a user's own algorithm or environment, as training finds it
    _refuse_if_invalid(argv)
    train([*argv, "--cfg", "job", *([] if unresolved or "--resolve" in argv else ["--resolve"])])


def _refuse_if_invalid(argv: list[str]) -> None:
    """Exit 2 with the problems training would name for these overrides. A sweep (`-m`) and
    Hydra's own flags are left to Hydra: one config is not what they print."""
    from hydra._internal.utils import get_args_parser
    from omegaconf import OmegaConf, open_dict

    from rlpar.config.compose import compose_config
    from rlpar.config.overrides import override_problems
    from rlpar.config.validate import ConfigError, validate_config
    from rlpar.runtime.resume import config_for_resume

    args = get_args_parser().parse_args(argv)
    if args.multirun or args.shell_completion or args.hydra_help or args.config_name or args.config_path:
        return
    if problems := override_problems(args.overrides):
        _refuse(problems)
    try:
        cfg = compose_config(args.overrides)
    except Exception:  # noqa: BLE001 - anything else wrong with the command: Hydra says it in its own words next
        return
    if cast(dict, OmegaConf.to_container(cfg, resolve=False))["run_dir"] == "${hydra:runtime.output_dir}":
        with open_dict(cfg):
            cfg.run_dir = str(Path.cwd() / "outputs")  # where Hydra would make the run's directory
    try:
        validate_config(config_for_resume(cfg) if cfg.get("resume") else cfg)
    except ConfigError as err:
        _refuse(err.problems)


# -- evaluate ----------------------------------------------------------------------------------
class _OneLineParser(argparse.ArgumentParser):
    """Usage mistakes in one line (exit 2), not argparse's usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} ({self.prog} --help)\n")


def _integer_at_least(low: int, expected: str):
    """An argparse type: an integer of at least `low`, or one line saying what was `expected`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


def _run_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="a training run's directory (config.yaml, checkpoints/)"
    )


def evaluate(argv: list[str]) -> int:
    parser = _OneLineParser(
        prog="rlpar evaluate",
        description="Run the deterministic policy of a run's newest checkpoint on fresh environments: print the "
        "returns, append them to RUN_DIR/evaluations.jsonl and TensorBoard (and W&B for a logger=wandb "
        "run), and record videos in RUN_DIR/videos/.",
    )
    _run_dir_argument(parser)
    parser.add_argument(
        "--episodes",
        type=_integer_at_least(1, "a positive integer"),
        default=10,
        metavar="N",
        help="episodes to run (default 10)",
    )
    parser.add_argument(
        "--video",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record MP4 videos with render_mode=rgb_array (default: on)",
    )
    parser.add_argument(
        "--video-episodes",
        type=_integer_at_least(0, "a number of episodes (0 or more)"),
        default=1,
        metavar="K",
        help="how many of the episodes, the first ones, to record (default 1)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="S",
        help="seed of the first episode, S+i of episode i (default: the run's seed + 10000, as "
        "training's own final evaluation)",
    )
    parser.add_argument(
        "--stochastic",
        action="store_true",
        help="sample actions from the policy (its distribution; a Q-network: epsilon-greedy at "
        "epsilon 0.05) instead of taking the greedy ones; the evaluations.jsonl row says which",
    )
    parser.add_argument(
        "--opponent",
        default=None,
        metavar="WHO",
        help="a turn-based game's opponent: random, self (the evaluated policy), scripted (the game's scripted "
        "player, where it has one), or a checkpoint file whose policy plays it (default: the run's env.opponent; "
        "self for a run trained against a pool); games alternate who moves first and the row "
        "gains win_rate, draw_rate, loss_rate, first_mover_win_rate and illegal_actions",
    )
    parser.add_argument(
        "--trust",
        action="store_true",
        help="import the code that RUN_DIR's config.yaml names (environment, network) even where this "
        "user's key did not sign it: a run from elsewhere, or a config.yaml edited to name other code",
    )
    args = parser.parse_args(argv)
    interrupts.exit_at_once_on_signals()  # while torch and Gymnasium load
    from rlpar.errors import first_line
    from rlpar.runtime.evaluate_run import EvaluateError, evaluate_run

    interrupts.stop_on_signals()
    try:
        result = evaluate_run(
            args.run_dir,
            episodes=args.episodes,
            seed=args.seed,
            trust=args.trust,
            stochastic=args.stochastic,
            opponent=args.opponent,
            video_episodes=min(args.video_episodes, args.episodes) if args.video else 0,
        )
    except EvaluateError as err:
        print(f"rlpar: evaluate: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        interrupts.stop_under_way()
        print("rlpar: interrupted", file=sys.stderr)
        return interrupts.INTERRUPTED_EXIT_CODE
    except Exception as err:  # an environment or a library failing: named in one line
        print(f"rlpar: evaluate failed: {type(err).__name__}: {first_line(err)}", file=sys.stderr)
        return 1
    finally:
        interrupts.ignore_signals()
    for note in result.get("notes", []):
        print(note)
    print(result["summary"])
    for video in result["videos"]:
        print(f"video: {video}")
    return 0


# -- export and serve: a policy outside its run -----------------------------------------------
def _policy_arguments(parser: argparse.ArgumentParser) -> None:
    """What export and serve share with evaluate: the run, its checkpoint, and --trust."""
    _run_dir_argument(parser)
    parser.add_argument(
        "--checkpoint",
        default=None,
        metavar="C",
        help="a checkpoint file, or the name of one in RUN_DIR/checkpoints/ (default: the newest that verifies)",
    )
    parser.add_argument(
        "--trust",
        action="store_true",
        help="import the code that RUN_DIR's config.yaml names even where this user's key did not sign it "
        "(as rlpar evaluate --trust)",
    )


def _with_policy_errors(command: str, act) -> int:
    """`act()`'s exit status; a run it cannot read, bad input or a failure in one line."""
    from rlpar.errors import first_line
    from rlpar.runtime.evaluate_run import EvaluateError

    interrupts.stop_on_signals()
    try:
        return act()
    except EvaluateError as err:
        print(f"rlpar: {command}: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        interrupts.stop_under_way()
        print("rlpar: interrupted", file=sys.stderr)
        return interrupts.INTERRUPTED_EXIT_CODE
    except Exception as err:  # a library failing (the exporter, the environment): named in one line
        print(f"rlpar: {command} failed: {type(err).__name__}: {first_line(err)}", file=sys.stderr)
        return 1
    finally:
        interrupts.ignore_signals()


def export(argv: list[str]) -> int:
    parser = _OneLineParser(
        prog="rlpar export",
        description="Write the greedy policy of a run's checkpoint as one ONNX or TorchScript graph holding its "
        "observation whitening, action masks, action squashing and scaling (a recurrent one takes and returns its "
        "state), with FILE.json describing its spaces, inputs and outputs, and where it came from. A multi-agent "
        "run gives one file per policy, STEM.<policy>.SUFFIX.",
    )
    _policy_arguments(parser)
    parser.add_argument("--format", required=True, choices=("onnx", "torchscript"), help="the file's format")
    parser.add_argument("--out", required=True, type=Path, metavar="FILE", help="the file to write")
    args = parser.parse_args(argv)
    interrupts.exit_at_once_on_signals()  # while torch loads

    def write() -> int:
        from rlpar.serving.export import export_run

        for path in export_run(args.run_dir, args.format, args.out, checkpoint=args.checkpoint, trust=args.trust):
            print(f"exported: {path} (described in {path}.json)")
        return 0

    return _with_policy_errors("export", write)


def serve(argv: list[str]) -> int:
    from rlpar.serving.server import TOKEN_VARIABLE, is_loopback

    parser = _OneLineParser(
        prog="rlpar serve",
        description="Serve the policy of a run's checkpoint over HTTP until interrupted: POST /act "
        '{"observation": ..., "session": ID} answers {"action": ...} (a batch: "observations", "sessions"); '
        'a recurrent policy keeps a state per session, zeroed by "reset": true; GET / describes the policy.',
    )
    _policy_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", metavar="H", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=_integer_at_least(0, "a port number"),
        default=8000,
        metavar="P",
        help="port (default 8000; 0: a free one)",
    )
    parser.add_argument(
        "--token",
        default=None,
        metavar="T",
        help=f"a secret every request must send (Authorization: Bearer T); needed to bind any address but "
        f"loopback; also read from ${TOKEN_VARIABLE}",
    )
    parser.add_argument(
        "--stochastic", action="store_true", help="sample actions from the policy instead of taking the greedy ones"
    )
    parser.add_argument("--seed", type=int, default=None, metavar="S", help="seed of --stochastic's noise")
    args = parser.parse_args(argv)
    token = args.token or os.environ.get(TOKEN_VARIABLE) or None
    if token is None and not is_loopback(args.host):
        print(
            f"rlpar serve: --host {args.host} is reachable from other machines: give --token T (or ${TOKEN_VARIABLE}), "
            f"which every request must send",
            file=sys.stderr,
        )
        return 2
    interrupts.exit_at_once_on_signals()  # while torch and Gymnasium load

    def run_server() -> int:
        from rlpar.serving.policy import load_policy
        from rlpar.serving.server import make_server

        loaded = load_policy(
            args.run_dir, args.checkpoint, stochastic=args.stochastic, seed=args.seed, trust=args.trust
        )
        try:
            server = make_server(loaded, args.host, args.port, token)
        except OSError as err:
            print(f"rlpar serve: cannot listen on {args.host}:{args.port} ({err.strerror or err})", file=sys.stderr)
            return 2
        with server:
            print(f"serving {args.run_dir} on {server.url} (POST /act, GET /; Ctrl-C stops)", flush=True)
            server.serve_forever()
        return 0

    return _with_policy_errors("serve", run_server)


# -- report ------------------------------------------------------------------------------------
def report(argv: list[str]) -> int:
    from rlpar.report import main as report_main

    try:
        report_main(argv, prog="rlpar report")
    except KeyboardInterrupt:
        print("rlpar: interrupted", file=sys.stderr)
        return interrupts.INTERRUPTED_EXIT_CODE
    return 0
