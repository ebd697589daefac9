"""Where rlpar's Hydra config groups live: `conf/` at the top of a clone (also for an editable
install), or `rlpar/conf/` inside an installed wheel (setup.py copies it there)."""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # rlpar/


def _find_conf_dir() -> Path:
    for candidate in (_PACKAGE / "conf", _PACKAGE.parent / "conf"):  # installed wheel, then clone
        if (candidate / "config.yaml").is_file():
            return candidate
    return _PACKAGE.parent / "conf"  # not found: the clone's place, named in the error that follows


CONF_DIR = _find_conf_dir()
