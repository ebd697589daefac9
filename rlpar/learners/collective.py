"""The collective operations a data-parallel learner needs, over one torch.distributed group.

Every rank calls the same operations in the same order; a peer that never arrives ends the call
with an error after the group's timeout instead of a hang (gloo's own timeout)."""

from __future__ import annotations

import datetime
import os
import socket
import time

import torch
import torch.distributed as dist


def meeting_point(address: str) -> socket.socket:
    """Where rank 0 opens the group: a socket listening on `address` only (torch's own store
    would listen on every interface), on a port free from now on."""
    return socket.create_server((address, 0), family=socket.AF_INET6 if ":" in address else socket.AF_INET)


def join_group(
    *, rank: int, world_size: int, address: str, port: int, timeout_s: float, listening: socket.socket | None = None
) -> Collective:
    """Join (or, on rank 0, open: at `listening` where given) the gloo group that `world_size`
    learners meet in at `address:port`; every collective op then fails after `timeout_s` if a
    peer is missing."""
    leave_group()  # a rank joining again (a restarted group, a resume) leaves its old group first
    if address.startswith("127."):  # gloo's pairs bind the host name's interface unless told: stay on loopback
        os.environ["GLOO_SOCKET_IFNAME"] = _loopback_interface()
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(
        address,
        port,
        world_size,
        is_master=rank == 0,
        timeout=timeout,
        wait_for_workers=False,
        master_listen_fd=listening.detach() if listening is not None else None,
    )  # the store's now
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
    return Collective(rank=rank, world_size=world_size)


def _loopback_interface() -> str:
    names = [name for _, name in socket.if_nameindex()]
    return next((name for name in names if name.startswith("lo")), "lo")


def leave_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class Collective:
    """This process's place in the learner group, and the reductions that keep every rank's
    update identical: gradients, advantage statistics, diagnostics."""

    def __init__(self, *, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.gradient_reductions, self.gradient_reduction_s = 0, 0.0  # what averaging gradients costs, waits included

    def reduction_costs(self) -> dict:
        """What averaging gradients cost since the last call (logged by rank 0)."""
        costs = {
            "time_gradient_allreduce_s": self.gradient_reduction_s,
            "gradient_allreduce_ms": 1000 * self.gradient_reduction_s / max(self.gradient_reductions, 1),
        }
        self.gradient_reductions, self.gradient_reduction_s = 0, 0.0
        return costs

    def average_gradients(self, parameters: list[torch.Tensor], *, samples: int) -> None:
        """Each rank's gradient is that of a mean over its `samples`: weighting by them gives the
        gradient of the mean over every rank's samples, as one learner on the whole minibatch
        would have it. One all-reduce of a flat buffer (the sample count rides at its end)."""
        # (a rank without samples in this minibatch contributes nothing: its loss was a mean over none)
        grads = [p.grad if p.grad is not None and samples else torch.zeros_like(p) for p in parameters]
        flat = torch.cat([g.reshape(-1) for g in grads] + [grads[0].new_zeros(1)])
        flat[:-1] *= samples
        flat[-1] = samples
        start = time.perf_counter()
        dist.all_reduce(flat)
        self.gradient_reduction_s += time.perf_counter() - start
        self.gradient_reductions += 1
        flat[:-1] /= flat[-1]
        offset = 0
        for p, g in zip(parameters, grads):
            p.grad = flat[offset : offset + g.numel()].view_as(g).clone()
            offset += g.numel()

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The sum over ranks (float64 on the wire: statistics of many samples stay exact)."""
        total = values.detach().to(torch.float64).clone()
        dist.all_reduce(total)
        return total.to(values.dtype)

    def mean(self, values: torch.Tensor, *, samples: int) -> torch.Tensor:
        """The mean over every rank's samples of per-rank means over `samples` each."""
        return self.means_per_row(values.reshape(1, -1), samples=[samples]).view_as(values)

    def means_per_row(self, values: torch.Tensor, *, samples) -> torch.Tensor:
        """Row i of `values` ([rows, k]: per-rank means over `samples[i]` samples each, a
        minibatch's losses) as the mean over every rank's samples of row i, in one all-reduce. A
        rank without samples in a row adds nothing to it (its mean over none may be NaN)."""
        counts = torch.as_tensor(samples, dtype=torch.float64).reshape(-1, 1)
        mine = torch.where(counts > 0, values.detach().to(torch.float64) * counts, 0.0)
        weighted = self.sum(torch.cat([mine, counts], dim=1))
        return (weighted[:, :-1] / weighted[:, -1:]).to(values.dtype)

    def normalize(self, x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        """rlpar.learning.losses.ppo_loss.normalize over the union of every rank's `x` (unbiased std):
        one all-reduce of count, sum and sum of squares, in float64 (exact enough for advantages,
        and one round trip per minibatch instead of two)."""
        x64 = x.detach().to(torch.float64)
        count, total, squares = self.sum(
            torch.stack([torch.tensor(float(x.numel()), dtype=torch.float64), x64.sum(), (x64 * x64).sum()])
        )
        mean = total / count
        if count <= 1:
            return x - mean.to(x.dtype)
        std = torch.sqrt(torch.clamp(squares - count * mean * mean, min=0) / (count - 1))
        return (x - mean.to(x.dtype)) / (std.to(x.dtype) + eps)

    def smallest(self, value: int) -> int:
        """The smallest of every rank's `value`: how many steps all ranks can take together."""
        tensor = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
        return int(tensor.item())

    def broadcast_module(self, module: torch.nn.Module, *, parameters: bool = True) -> None:
        """Rank 0's buffers (observation statistics) and, with `parameters`, its weights, on every rank."""
        tensors = list(module.buffers()) + (list(module.parameters()) if parameters else [])
        with torch.no_grad():
            for tensor in tensors:
                dist.broadcast(tensor.data, src=0)
