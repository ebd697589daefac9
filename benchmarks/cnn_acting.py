"""Per-step cost of the CNN acting copies: numpy float64 (the default for `small`), numpy float32
and torch float32 (`acting=torch`, the default for `nature` and `impala`), for 1, 4 and 8
observations, one thread. The table in rlpar/models/acting/numpy_cnn.py comes from this script.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/cnn_acting.py
"""

from __future__ import annotations

import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rlpar.envs.spaces import ActionInfo  # noqa: E402
from rlpar.models.acting.numpy_cnn import NumpyCNNPolicy  # noqa: E402
from rlpar.models.spec import PolicySpec  # noqa: E402
from rlpar.models.acting.torch_acting import TorchPolicy  # noqa: E402

CASES = [("nature", (4, 84, 84), False), ("impala", (4, 84, 84), False), ("small", (3, 5, 5), True)]


def best_ms(fn, repeats: int = 7, calls: int = 20) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return 1000 * min(times)


def main() -> None:
    torch.set_num_threads(1)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.processor() or platform.machine()}, "
          f"numpy {np.__version__}, torch {torch.__version__}, one thread; ms per act() call, best of 7")
    print("| encoder | N obs | numpy f64 | numpy f32 | torch f32 |")
    print("|---|---|---|---|---|")
    for encoder, image_shape, channels_last in CASES:
        spec = PolicySpec(obs_dim=int(np.prod(image_shape)), obs_dtype="uint8", image_shape=image_shape,
                          channels_last=channels_last, encoder=encoder, action=ActionInfo(discrete=True, size=6))
        weights = {k: v.numpy() for k, v in spec.build().state_dict().items()}
        policies = [NumpyCNNPolicy(spec), NumpyCNNPolicy(spec, dtype=np.float32), TorchPolicy(spec)]
        for policy in policies:
            policy.set_weights(weights)
        rng = np.random.default_rng(0)
        for n in (1, 4, 8):
            obs = rng.integers(0, 256, (n, spec.obs_dim), dtype=np.uint8)
            noise = rng.random(n)
            cells = [f"{best_ms(lambda p=p: p.act(obs, noise)):.3g}" for p in policies]
            print(f"| {encoder} {image_shape} | {n} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
