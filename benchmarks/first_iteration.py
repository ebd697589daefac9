"""Seconds from launching `python main.py <overrides>` to its first logged iteration.

    .venv/bin/python benchmarks/first_iteration.py parallel=distributed workers=2
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def seconds_to_first_iteration(overrides: list[str], timeout: float = 120.0) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "metrics.jsonl"
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "main.py", *overrides, "progress=false", f"hydra.run.dir={tmp}"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while time.perf_counter() - start < timeout:
                if metrics.exists() and metrics.read_text().strip():
                    return time.perf_counter() - start
                if proc.poll() is not None:
                    raise RuntimeError(f"main.py exited with {proc.returncode} before its first iteration")
                time.sleep(0.02)
            raise TimeoutError("no iteration logged")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    print(f"{seconds_to_first_iteration(sys.argv[1:]):.2f} s to the first iteration")
