"""Packaging hook (metadata: pyproject.toml): ship the repository's Hydra configs, `conf/`, inside
the wheel as `rlpar/conf/`. conf/ stays at the top of the clone, where the docs and tests name it;
rlpar.config.conf_dir finds either place. An editable install (`pip install -e .`) copies nothing:
the package then reads the clone's conf/ directly."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CONF = Path(__file__).resolve().parent / "conf"


class BuildPyWithConf(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "rlpar" / "conf"
        for path in sorted(p for p in CONF.rglob("*") if p.suffix in (".yaml", ".csv")):  # rows.csv: the benchmark's table
            destination = target / path.relative_to(CONF)
            self.mkpath(str(destination.parent))
            self.copy_file(str(path), str(destination))


setup(cmdclass={"build_py": BuildPyWithConf})
