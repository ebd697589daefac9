"""rlpar command line: `python main.py [group=option ...] [key=value ...]` (Hydra)."""

from __future__ import annotations

from rlpar.runtime import interrupts

if __name__ == "__main__":  # before any other import: Ctrl-C or SIGTERM during them exits 130 at once
    interrupts.exit_at_once_on_signals()

import importlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from rlpar.config.overrides import override_problems  # noqa: E402
from rlpar.config.presets import apply_preset, user_set_keys  # noqa: E402
from rlpar.config.validate import ConfigError, validate_config  # noqa: E402
from rlpar.errors import first_line  # noqa: E402
from rlpar.runtime import run_lock  # noqa: E402
from rlpar.runtime.errors import TRAINING_STOPS  # noqa: E402
from rlpar.runtime.resume import config_for_resume  # noqa: E402


LOADER_THREAD = "rlpar-import"


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    interrupts.stop_on_signals()  # SIGTERM: the same clean stop as Ctrl-C
    hydra_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        preset, overrides = None, []
        if cfg.get("resume"):
            cfg = config_for_resume(cfg)  # the run's own config: its preset was applied when it started
        else:
            hydra = HydraConfig.get()
            overrides = OmegaConf.to_container(hydra.overrides.task, resolve=False)  # as typed: `x=${y}` stays text
            preset = apply_preset(cfg, user_set_keys(overrides, dict(hydra.runtime.choices)))
        validate_config(cfg)  # every problem at once, before anything slow is imported or started
        if preset:
            print(preset, flush=True)
        run_lock.acquire(cfg.run_dir)  # before Ray boots: a second run on this directory is refused at once
        if cfg.get("search"):
            from rlpar.search.tune_search import run_search

            best = run_search(cfg, overrides=overrides)
            return best.get("final")
        _load_rlpar_while_ray_starts(cfg)
        from rlpar.runtime.run import run

        final = run(cfg, validated=True)
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
        _remove_if_empty(hydra_dir)
    return final.get("episode_return_mean")


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


def _load_rlpar_while_ray_starts(cfg: DictConfig) -> None:
    """For a private Ray instance: import torch and the trainer in a thread while Ray boots."""
    if not str(cfg.parallel.get("_target_", "")).endswith("DistributedSampler") or cfg.ray.address:
        return
    from rlpar.cluster.connection import start_private_instance_early

    loader = threading.Thread(target=importlib.import_module, args=("rlpar.runtime.run",), daemon=True,
                              name=LOADER_THREAD)
    loader.start()
    start_private_instance_early(num_cpus=cfg.ray.num_cpus, object_store_mb=cfg.ray.object_store_mb)
    loader.join()


def _leave_past_background_torch(code) -> None:
    """A run that ends while a thread still works in torch leaves at once, everything else being
    closed: the interpreter's normal shutdown would tear torch down under it (an abort under a
    compile, a traceback under an import). Such a thread is the learner compiling in the
    background (a short or interrupted run; waiting could take half a minute), or the import of
    rlpar's trainer while Ray boots (a run interrupted twice then)."""
    compiled = sys.modules.get("rlpar.learning.compiled")  # not (yet) imported: nothing compiles
    compiling = getattr(compiled, "compiling_in_background", lambda: False)()
    importing = any(thread.name == LOADER_THREAD and thread.is_alive() for thread in threading.enumerate())
    if compiling or importing:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else int(code is not None))


if __name__ == "__main__":
    if problems := override_problems(sys.argv[1:]):  # Hydra would answer with a traceback
        _refuse(problems)
    exit_code = 0
    try:
        try:
            main()
            if interrupts.interrupted():  # a signal during the final clean-up, which it did not cut short
                _exit_interrupted()
        except KeyboardInterrupt:  # one raised outside main()'s own handling: in Hydra, or main()'s last lines
            interrupts.stop_under_way()
            _stop_private_ray()
            _exit_interrupted()
    except SystemExit as exit_:
        exit_code = exit_.code
        raise
    finally:
        interrupts.ignore_signals()
        _leave_past_background_torch(exit_code)
