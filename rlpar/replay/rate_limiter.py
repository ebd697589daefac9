"""Holds actors and learner to a ratio of samples to inserts (Reverb's SampleToInsertRatio).

Without it, the number of times each transition is replayed depends on how fast the machine's
actors happen to run against its learner, so the same configuration learns differently on a
laptop and on a cluster. Here `diff = inserts * samples_per_insert - samples` must stay within
`samples_per_insert * min_size +- tolerance`: an insert that would push it above waits for the
learner to sample, a sample that would push it below waits for actors to insert. Until
`min_size` items were inserted, inserts always go through and sampling waits.

Deadlock freedom: with at least min_size items inserted, an insert of `insert_batch` is blocked
only when diff > upper - spi * insert_batch and a sample of `sample_batch` only when
diff < lower + sample_batch; both at once is impossible exactly when
    2 * tolerance >= samples_per_insert * insert_batch + sample_batch,
which the constructor checks. (The insert that reaches min_size may overshoot the upper bound
by at most spi * (insert_batch - 1) items' worth; only sampling is allowed until diff is back.)
"""

from __future__ import annotations

SIDES = ("insert", "sample")


def least_tolerance(*, samples_per_insert: float, insert_batch: int, sample_batch: int) -> float:
    """The smallest tolerance that cannot deadlock (see the module's docstring)."""
    return (samples_per_insert * insert_batch + sample_batch) / 2


class RateLimiter:
    def __init__(
        self, *, min_size: int, samples_per_insert: float, tolerance: float, insert_batch: int, sample_batch: int
    ):
        if min_size < 1 or samples_per_insert <= 0 or insert_batch < 1 or sample_batch < 1:
            raise ValueError(
                "rate limiter needs min_size >= 1, samples_per_insert > 0 and batches >= 1, got "
                f"min_size={min_size}, samples_per_insert={samples_per_insert}, "
                f"insert_batch={insert_batch}, sample_batch={sample_batch}"
            )
        needed = least_tolerance(
            samples_per_insert=samples_per_insert, insert_batch=insert_batch, sample_batch=sample_batch
        )
        if tolerance < needed:
            raise ValueError(
                f"rate limiter tolerance {tolerance} could deadlock: with samples_per_insert="
                f"{samples_per_insert}, insert batches of {insert_batch} and sample batches of "
                f"{sample_batch} it must be at least (spi * insert_batch + sample_batch) / 2 = {needed}"
            )
        self.min_size, self.tolerance = int(min_size), float(tolerance)
        self.samples_per_insert = float(samples_per_insert)
        self.insert_batch, self.sample_batch = int(insert_batch), int(sample_batch)
        self.inserts = self.samples = 0
        self.insert_wait_s = self.sample_wait_s = 0.0

    @property
    def diff(self) -> float:
        """Computed from the integer counts each time, so no rounding accumulates."""
        return self.inserts * self.samples_per_insert - self.samples

    @property
    def bounds(self) -> tuple[float, float]:
        offset = self.samples_per_insert * self.min_size
        return offset - self.tolerance, offset + self.tolerance

    def _check(self, n: int, limit: int, side: str) -> None:
        if not 0 <= n <= limit:
            raise ValueError(
                f"a {side} of {n} items: the rate limiter was set up for at most {limit} "
                "(its deadlock-freedom bound depends on it)"
            )

    def can_insert(self, n: int) -> bool:
        self._check(n, self.insert_batch, "insert")
        if self.inserts < self.min_size:
            return True
        return self.diff + self.samples_per_insert * n <= self.bounds[1]

    def can_sample(self, n: int) -> bool:
        self._check(n, self.sample_batch, "sample")
        return self.inserts >= self.min_size and self.diff - n >= self.bounds[0]

    def record_insert(self, n: int) -> None:
        self.inserts += int(n)

    def record_sample(self, n: int) -> None:
        self.samples += int(n)

    def waited(self, side: str, seconds: float) -> None:
        """Time a caller spent blocked on this limiter (a caller that keeps waiting shows which
        side is the bottleneck)."""
        if side == "insert":
            self.insert_wait_s += float(seconds)
        elif side == "sample":
            self.sample_wait_s += float(seconds)
        else:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")

    def state_dict(self) -> dict:
        return {
            "inserts": self.inserts,
            "samples": self.samples,
            "insert_wait_s": self.insert_wait_s,
            "sample_wait_s": self.sample_wait_s,
        }

    def load_state_dict(self, state: dict) -> None:
        self.inserts, self.samples = int(state["inserts"]), int(state["samples"])
        self.insert_wait_s, self.sample_wait_s = float(state["insert_wait_s"]), float(state["sample_wait_s"])
