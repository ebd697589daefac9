"""`rlpar evaluate RUN_DIR`: the deterministic policy of a run's newest checkpoint, on fresh
environments seeded away from training's, with videos.

Reads only what a run directory holds: `config.yaml` (the environment and the network) and the
newest checkpoint that verifies (weights only: `torch.load(weights_only=True)`, no pickle is
unpickled, so any run directory can be evaluated). Nothing is trained and no worker is started.
Writes:
- `videos/<checkpoint>-seed<S>-episode-<i>.mp4`: the first episodes, through Gymnasium's
  RecordVideo (render_mode=rgb_array);
- one row per evaluation in `evaluations.jsonl` (returns, lengths, checkpoint, seed, videos;
  `source: evaluate`, where a run's own final evaluation, `eval_episodes`, writes `source: training`);
- the eval scalars and the first video (a GIF) to TensorBoard, at the checkpoint's env step;
- with `logger=wandb`, the same to a W&B run of job type `evaluate` (offline by default).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

VIDEO_DIR = "videos"
EVALUATIONS_FILE = "evaluations.jsonl"
TENSORBOARD_DIR = "tensorboard"
# Frames are held in memory until a video is encoded: an episode without a time limit is recorded
# up to this many (at CartPole's 600x400 pixels, about 0.7 GB; its episodes end at 500 steps)
MAX_VIDEO_FRAMES = 1000


class EvaluateError(Exception):
    """What makes a run impossible to evaluate, in one line; `exit_code` 2 for a bad run
    directory or checkpoint, 1 for what this machine or environment lacks."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


class RunTarget(NamedTuple):
    """What an evaluation plays: the run's environment and network with a checkpoint's weights, from
    `seed` on, and where in training those weights were saved."""

    env_spec: Any
    policy_spec: Any
    weights: dict
    seed: int
    iteration: int
    env_steps: int


def evaluate_run(
    run_dir: str | Path,
    *,
    episodes: int = 10,
    video_episodes: int = 1,
    seed: int | None = None,
    tensorboard: bool = True,
    wandb: bool | None = None,
    max_steps: int = 100_000,
    trust: bool = False,
    stochastic: bool = False,
    opponent: str | None = None,
) -> dict:
    """Evaluate the newest checkpoint of `run_dir` for `episodes` episodes, recording the first
    `video_episodes` of them; returns the metrics, per-episode returns, checkpoint and video paths,
    and a one-line `summary`. `wandb=None`: W&B exactly when the run logged to it. The code that
    config.yaml names is imported only where this user's key signed it (rlpar.runtime.run_dir),
    or when `trust`. `stochastic`: actions sampled as in training, not the greedy ones.
    `opponent` (a turn-based game's): `random`, `self`, `scripted`, or a checkpoint file whose policy plays
    the other seats; None: the run's own `env.opponent` (`self` for a run that trained against a pool)."""
    run_dir = Path(run_dir)
    config, checkpoint, target = load_run(run_dir, seed=seed, trust=trust)
    use_wandb = bool(wandb or (wandb is None and _wandb_options(config)))
    _refuse_links(run_dir, _written_names(video_episodes, tensorboard, use_wandb))
    target, opponent_weights = _with_opponent(target, opponent)

    prefix = f"{checkpoint.stem}-seed{target.seed}"
    notes: list[str] = []
    video_episodes = _video_episodes_possible(video_episodes, notes)
    metrics, returns, lengths, videos = _play(
        target, run_dir / VIDEO_DIR, prefix, episodes, video_episodes, max_steps, stochastic, notes, opponent_weights
    )
    row = _result_row(run_dir, checkpoint, target, stochastic, metrics, returns, lengths, videos)
    if "win_rate" in metrics:
        row = {**row, "opponent": opponent or target.env_spec.opponent}
    _append_line(run_dir / EVALUATIONS_FILE, json.dumps(row))
    _log_evaluation(run_dir, config, metrics, videos, target.env_steps, f"evaluate-{prefix}", tensorboard, use_wandb)
    return {
        **row,
        "videos": [str(v) for v in videos],
        "checkpoint_path": str(checkpoint),
        "summary": _summary(row, metrics, episodes),
        "notes": notes,
    }


def load_run(
    run_dir: str | Path,
    *,
    checkpoint: str | Path | None = None,
    seed: int | None = None,
    trust: bool = False,
    trust_hint: str | None = None,
) -> tuple[dict, Path, RunTarget]:
    """(config.yaml, the checkpoint's path, what it plays) of a run directory, read as evaluate
    reads it: its newest valid checkpoint, or `checkpoint` (a file, or a name in checkpoints/),
    weights only; the code config.yaml names imported only where this user's key signed it, or
    with `trust` (`trust_hint`: how the refusal says to pass it). EvaluateError otherwise."""
    run_dir = Path(run_dir)
    config = _run_config(run_dir)
    path, state = _newest_checkpoint(run_dir) if checkpoint is None else _chosen_checkpoint(run_dir, checkpoint)
    _refuse_unsigned_code(run_dir, config, trust, trust_hint)
    return config, path, _evaluation_target(run_dir, config, path, state, seed)


def _with_opponent(target: RunTarget, opponent: str | None) -> tuple[RunTarget, dict | None]:
    """The target with a turn-based game's `opponent` (random, self, or a checkpoint file's
    policy, whose weights are returned) in place of the run's; EvaluateError where the run's
    environment is no turn-based game or the checkpoint's policy does not fit."""
    from dataclasses import replace

    from rlpar.envs.factory import TURN_BASED_ENTRY_POINT
    from rlpar.envs.pettingzoo import STANDALONE_OPPONENTS

    spec = target.env_spec
    if opponent is None:
        if spec.entry_point == TURN_BASED_ENTRY_POINT and spec.opponent not in STANDALONE_OPPONENTS:
            opponent = "self"  # a pool lives in the trainer: the policy plays itself
        else:
            return target, None
    if spec.entry_point != TURN_BASED_ENTRY_POINT:
        raise EvaluateError(f"--opponent: {spec.id or spec.entry_point} is not a turn-based game (env=pettingzoo)")
    weights = None
    if opponent not in STANDALONE_OPPONENTS:
        path = Path(opponent)
        if not path.is_file():
            raise EvaluateError(
                f"--opponent: expected {', '.join(STANDALONE_OPPONENTS)} or a checkpoint file, got '{opponent}'"
            )
        from rlpar.runtime.checkpoint import load_checkpoint

        try:
            weights = _policy_weights(path, load_checkpoint(path))
        except EvaluateError:
            raise
        except Exception as err:  # a damaged or foreign file, in any of many ways
            raise EvaluateError(f"--opponent: cannot read checkpoint '{path}' ({type(err).__name__}: {err})") from None
        if misfit := _weights_misfit(target.policy_spec, weights):
            raise EvaluateError(f"--opponent: the policy of '{path}' does not fit this run's network ({misfit})")
        opponent = "self"
    spec = replace(spec, opponent=opponent, kwargs={**spec.kwargs, "opponent": opponent})
    return target._replace(env_spec=spec), weights


def _refuse_unsigned_code(run_dir: Path, config: dict, trust: bool, trust_hint: str | None = None) -> None:
    """Nothing config.yaml names is imported unless this user's key signed it, or `trust`."""
    from rlpar.runtime.run_dir import unsigned_code

    if not trust and (why := unsigned_code(run_dir, config)):
        hint = trust_hint or f"rlpar evaluate {run_dir} --trust"
        raise EvaluateError(
            f"'{run_dir}': its config.yaml names code to import that this user's key did not sign: "
            f"{why}; nothing was imported. If you trust that directory: {hint}"
        )


def _wandb_options(config: dict):
    """The run's own W&B settings (None where it did not log to W&B)."""
    return (config.get("logger") or {}).get("wandb")


def _written_names(video_episodes: int, tensorboard: bool, use_wandb: bool) -> list[str]:
    """What this evaluation writes into the run directory."""
    return [
        EVALUATIONS_FILE,
        *([VIDEO_DIR] if video_episodes > 0 else []),
        *([TENSORBOARD_DIR] if tensorboard else []),
        *(["wandb"] if use_wandb else []),
    ]


def _evaluation_target(run_dir: Path, config: dict, checkpoint: Path, state: dict, seed: int | None) -> RunTarget:
    """`_what_to_evaluate`, its failure on any value of config.yaml or the checkpoint in one line."""
    from rlpar.errors import first_line

    try:
        return _what_to_evaluate(run_dir, config, checkpoint, state, seed)
    except (EvaluateError, ImportError):  # the latter: rlpar's own, as the user's code is checked first
        raise
    except Exception as err:  # a value of config.yaml or the checkpoint that building fails on, in any of many ways
        raise EvaluateError(
            f"'{run_dir}' cannot be evaluated: its config.yaml or {checkpoint.name} holds what cannot "
            f"be used ({type(err).__name__}: {first_line(err)})"
        ) from None


def _video_episodes_possible(video_episodes: int, notes: list[str]) -> int:
    """`video_episodes`, or 0 with a note where MoviePy (an optional extra) is missing: the returns
    do not need it."""
    if video_episodes > 0 and not _moviepy_installed():
        notes.append(
            "rlpar: evaluate: no video (MoviePy is not installed: pip install 'rlpar[video]'; "
            "--no-video skips videos without this note)"
        )
        return 0
    return video_episodes


def _play(
    target: RunTarget,
    video_dir: Path,
    prefix: str,
    episodes: int,
    video_episodes: int,
    max_steps: int,
    stochastic: bool,
    notes: list[str],
    opponent_weights: dict | None = None,
) -> tuple[dict, list[float], list[int], list[Path]]:
    """The episodes played: (metrics, returns, lengths, videos), the first `video_episodes` recorded."""
    from rlpar.errors import first_line
    from rlpar.runtime.evaluation import evaluate_policy

    record = _video_recorder(video_dir, prefix, video_episodes) if video_episodes > 0 else None
    per_episode: list = []
    try:
        metrics = evaluate_policy(
            target.weights,
            policy_spec=target.policy_spec,
            env_spec=target.env_spec,
            num_episodes=episodes,
            seed=target.seed,
            max_steps=max_steps,
            render_mode="rgb_array" if record else None,
            wrap_env=record,
            episodes=per_episode,
            stochastic=stochastic,
            opponent_weights=opponent_weights,
        )
    except BaseException as err:
        if record:  # what was recorded before the failure, possibly a file cut off mid-write
            _remove_videos(video_dir, prefix)
        if record and isinstance(err, TypeError) and "render_mode" in str(err):  # a user's class without render_mode
            raise EvaluateError(
                f"the environment cannot render frames for a video ({first_line(err)}): pass --no-video", 1
            ) from None
        raise
    returns = [float(r) for r, _ in per_episode]
    lengths = [int(n) for _, n in per_episode]
    metrics["eval_length_mean"] = float(np.mean(lengths))
    videos = _recorded_videos(video_dir, prefix, lengths[:video_episodes], notes) if record else []
    return metrics, returns, lengths, videos


def _recorded_videos(video_dir: Path, prefix: str, recorded_lengths: list[int], notes: list[str]) -> list[Path]:
    """The videos the recorded episodes left, in episode order; a note where one was cut."""
    videos = sorted(video_dir.glob(f"{prefix}-episode-*.mp4"), key=_episode_number)
    if not videos:
        raise EvaluateError(f"no video was written to {video_dir} (the environment rendered no frames)", 1)
    if any(length >= MAX_VIDEO_FRAMES for length in recorded_lengths):
        notes.append(f"rlpar: evaluate: videos show an episode's first {MAX_VIDEO_FRAMES} frames at most")
    return videos


def _result_row(
    run_dir: Path,
    checkpoint: Path,
    target: RunTarget,
    stochastic: bool,
    metrics: dict,
    returns: list[float],
    lengths: list[int],
    videos: list[Path],
) -> dict:
    """The evaluation's row of evaluations.jsonl."""
    from rlpar.runtime.evaluation import policy_kind

    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "source": "evaluate",
        "checkpoint": checkpoint.name,
        "iteration": target.iteration,
        "env_steps": target.env_steps,
        "seed": target.seed,
        "policy": policy_kind(stochastic),
        **metrics,
        "returns": returns,
        "lengths": lengths,
        "videos": [str(v.relative_to(run_dir)) for v in videos],
    }


def _log_evaluation(
    run_dir: Path,
    config: dict,
    metrics: dict,
    videos: list[Path],
    env_steps: int,
    name: str,
    tensorboard: bool,
    use_wandb: bool,
) -> None:
    """The eval scalars and the first video to TensorBoard and W&B, at the checkpoint's env step."""
    from rlpar.logging.tags import tag_for

    scalars = {tag_for(k): float(v) for k, v in metrics.items() if k != "eval_episodes"}
    first_video = videos[0] if videos else None
    if tensorboard:
        from rlpar.logging.video import log_to_tensorboard

        log_to_tensorboard(run_dir / TENSORBOARD_DIR, step=env_steps, scalars=scalars, video=first_video)
    if use_wandb:
        from rlpar.logging.video import log_to_wandb

        log_to_wandb(
            run_dir,
            config,
            dict(_wandb_options(config) or {}),
            step=env_steps,
            scalars=scalars,
            video=first_video,
            name=name,
        )


def _summary(row: dict, metrics: dict, episodes: int) -> str:
    """The evaluation in one line: each return, their mean, and what was evaluated."""
    shown = " ".join(f"{r:.2f}" for r in row["returns"])  # one precision for all, as the mean's
    return (
        f"returns: {shown} (mean {metrics['eval_return_mean']:.2f} +- {metrics['eval_return_std']:.2f} over "
        f"{episodes} {row['policy']} episodes; {row['checkpoint']}, iteration {row['iteration']}, "
        f"{row['env_steps']:,} env steps, seed {row['seed']})"
    )


def _what_to_evaluate(run_dir: Path, config: dict, checkpoint: Path, state: dict, seed: int | None) -> RunTarget:
    """The run's environment, network and weights, or EvaluateError where they no longer fit."""
    from rlpar.runtime.evaluation import EVAL_SEED_OFFSET

    # The environment may differ from training's (a variant to test the policy on), as long as
    # the network still fits its spaces; the network's own settings may not.
    trained_with = state.get("config") if isinstance(state.get("config"), dict) else None
    _refuse_changed_model(run_dir, config, checkpoint, trained_with)
    env_spec = _env_spec(config)
    policy_spec = _policy_spec(config, env_spec)
    weights = _policy_weights(checkpoint, state)
    _refuse_misfit_weights(config, checkpoint, trained_with, env_spec, policy_spec, weights)
    seed = int(config.get("seed", 0)) + EVAL_SEED_OFFSET if seed is None else int(seed)
    return RunTarget(env_spec, policy_spec, weights, seed, int(state["iteration"]), int(state["env_steps"]))


def _refuse_changed_model(run_dir: Path, config: dict, checkpoint: Path, trained_with: dict | None) -> None:
    """config.yaml's network settings must still be the ones the checkpoint was trained with."""
    from rlpar.config.changes import config_mismatches

    if trained_with is not None and (changed := config_mismatches(config, trained_with, sections=("model",))):
        raise EvaluateError(
            f"{run_dir / 'config.yaml'} no longer matches {checkpoint.name}, whose network was made "
            f"with another config: {'; '.join(changed)}; put those values back"
        )


def _env_spec(config: dict):
    """The environment config.yaml describes, one that this machine can make."""
    from rlpar.envs.factory import check_env_exists, resolve_env_spec

    env_spec = resolve_env_spec(**config["env"], centralised_critic=_centralised_critic(config))
    problem = check_env_exists(env_spec)
    if problem:
        where = " (run rlpar evaluate from the directory the run was trained in)" if env_spec.entry_point else ""
        raise EvaluateError(f"{problem}{where}")
    return env_spec


def _policy_weights(checkpoint: Path, state: dict) -> dict:
    from rlpar.runtime.evaluation import checkpoint_policy_weights

    try:
        return checkpoint_policy_weights(state["algorithm"])
    except (KeyError, TypeError) as err:
        raise EvaluateError(f"{checkpoint}: holds no policy weights ({err})") from None


def _refuse_misfit_weights(
    config: dict, checkpoint: Path, trained_with: dict | None, env_spec, policy_spec, weights: dict
) -> None:
    """The checkpoint's weights must fit the network the (possibly changed) environment's spaces
    give; where not, what config.yaml changed since training is named."""
    from rlpar.config.changes import config_mismatches

    if misfit := _weights_misfit(policy_spec, weights):
        changed = config_mismatches(config, trained_with, sections=("env",)) if trained_with is not None else []
        why = f" (config.yaml changed {'; '.join(changed)})" if changed else ""
        raise EvaluateError(
            f"{checkpoint.name}'s network does not fit {env_spec.id or env_spec.entry_point}'s spaces{why}: {misfit}"
        )


def _run_config(run_dir: Path) -> dict:
    import yaml

    if not run_dir.exists():
        raise EvaluateError(f"'{run_dir}' does not exist")
    if not run_dir.is_dir():
        raise EvaluateError(
            f"'{run_dir}' is a file; give the run directory (the one holding config.yaml and checkpoints/)"
        )
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise EvaluateError(f"'{run_dir}' is not an rlpar run directory (it has no config.yaml)")
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise EvaluateError(f"'{path}' cannot be read ({type(err).__name__})") from None
    if (
        not isinstance(config, dict)
        or not isinstance(config.get("env"), dict)
        or not isinstance(config.get("model"), dict)
    ):
        raise EvaluateError(f"'{path}' is not an rlpar run's config (no env and model sections)")
    if config.get("search"):
        raise EvaluateError(f"'{run_dir}' is a search; evaluate one of its trials: {run_dir / 'trials'}/<trial>")
    return config


def _newest_checkpoint(run_dir: Path):
    from rlpar.runtime.checkpoint import latest_valid_checkpoint

    damaged: list = []
    found = latest_valid_checkpoint(run_dir, damaged)
    if found is None and not damaged:
        raise EvaluateError(f"'{run_dir}' has no checkpoint to evaluate (checkpoints/ is empty or missing)")
    if found is None:
        raise EvaluateError(
            f"'{run_dir}': its {len(damaged)} checkpoint(s) are all damaged or unreadable (newest: {damaged[0][1]})"
        )
    for path, reason in damaged:
        print(f"rlpar: skipped checkpoint {path.name} ({reason}); evaluating {found[0].name}", flush=True)
    return found


def _chosen_checkpoint(run_dir: Path, checkpoint: str | Path):
    """A checkpoint named by the user: a file, or a file in the run's checkpoints/ (verified as the newest is)."""
    from rlpar.runtime.checkpoint import load_checkpoint
    from rlpar.runtime.errors import CheckpointError

    path = Path(checkpoint)
    if not path.is_file() and (run_dir / "checkpoints" / path).is_file():
        path = run_dir / "checkpoints" / path
    if not path.is_file():
        raise EvaluateError(f"checkpoint '{checkpoint}' is neither a file nor one in {run_dir / 'checkpoints'}")
    try:
        return path, load_checkpoint(path)
    except CheckpointError as err:
        raise EvaluateError(str(err)) from None


def _centralised_critic(config: dict) -> bool:
    """Whether the run's algorithm gave its critic the global state (its rows carry it): its class
    says so (imported only after `_refuse_unsigned_code`); one that cannot be imported did not."""
    from hydra.utils import get_class

    target = (config.get("algo") or {}).get("_target_")
    if not isinstance(target, str):
        return False
    try:
        return bool(getattr(get_class(target), "centralised_critic", False))
    except Exception:  # noqa: BLE001 - any failure of a user's module is the same "cannot import"
        return False


def _policy_spec(config: dict, env_spec):
    """The network the run trained, described exactly as build_trainer does."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from rlpar.config.validate import ConfigError
    from rlpar.runtime.build import probe_policy_spec

    model = config["model"]
    try:
        spec, _ = probe_policy_spec(
            env_spec,
            instantiate(OmegaConf.create(model), _partial_=True, _convert_="all"),
            normalize_obs=model.get("normalize_obs"),
        )
    except ConfigError as err:
        raise EvaluateError("; ".join(err.problems)) from None
    return spec


def _weights_misfit(policy_spec, weights: dict) -> str | None:
    """How the checkpoint's weights differ from the network `policy_spec` describes, or None."""
    expected = {name: tuple(value.shape) for name, value in policy_spec.build().state_dict().items()}
    got = {name: tuple(value.shape) for name, value in weights.items()}
    if expected == got:
        return None
    differing = sorted(name for name in expected.keys() | got.keys() if expected.get(name) != got.get(name))
    return "; ".join(
        f"{name}: checkpoint {got.get(name, 'absent')}, network {expected.get(name, 'absent')}"
        for name in differing[:3]
    ) + (f" and {len(differing) - 3} more" if len(differing) > 3 else "")


def _video_recorder(video_dir: Path, prefix: str, video_episodes: int):
    """Gymnasium's RecordVideo around the evaluation env, recording its first episodes."""
    # Frames are rendered into arrays: no window and no sound device (SDL would complain of both)
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    video_dir.mkdir(parents=True, exist_ok=True)
    _remove_videos(video_dir, prefix)  # an earlier evaluation of this checkpoint and seed

    def record(env):
        if env.render_mode != "rgb_array":
            modes = env.metadata.get("render_modes") or []
            raise EvaluateError(
                f"the environment cannot render frames for a video (render_mode "
                f"{env.render_mode!r}; it offers {modes}): pass --no-video",
                1,
            )
        with warnings.catch_warnings():  # "Overwriting existing videos": only this prefix's, removed above
            warnings.filterwarnings("ignore", message=".*Overwriting existing videos.*")
            return EpisodeVideos(
                env,
                str(video_dir),
                episode_trigger=lambda episode: episode < video_episodes,
                video_length=MAX_VIDEO_FRAMES - 1,
                name_prefix=prefix,
                disable_logger=True,
            )

    return record


def _moviepy_installed() -> bool:
    try:
        import moviepy  # noqa: F401  (Gymnasium's RecordVideo writes MP4s with it)
    except ImportError:
        return False
    return True


def _episode_number(path: Path) -> int:
    return int(path.stem.rsplit("-", 1)[1])


class EpisodeVideos(gym.wrappers.RecordVideo):
    """Gymnasium's RecordVideo with a video per episode, cut at `video_length` frames (its own
    `video_length` records snippets that run on into the following episodes)."""

    def reset(self, **kwargs):
        if self.recording:
            self.stop_recording()
        return super().reset(**kwargs)


def _remove_videos(video_dir: Path, prefix: str) -> None:
    for old in video_dir.glob(f"{prefix}-episode-*.mp4"):
        old.unlink(missing_ok=True)  # a link is removed itself, never what it points to


def _refuse_links(run_dir: Path, names: list[str]) -> None:
    """What evaluate writes into a run directory, never through a symbolic link to another place
    (appending to, writing into or deleting from it)."""
    for name in names:
        if (run_dir / name).is_symlink():
            kind = "file" if name == EVALUATIONS_FILE else "folder"
            raise EvaluateError(
                f"'{run_dir / name}' is a symbolic link; rlpar evaluate writes into a run directory "
                f"only, never through a link (replace it with a {kind})"
            )


def _append_line(path: Path, line: str) -> None:
    """Append `line` to `path`, refusing a symbolic link put there since it was checked."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise EvaluateError(f"cannot write '{path}' ({err.strerror or err})") from None
    with os.fdopen(fd, "a") as handle:
        handle.write(line + "\n")
