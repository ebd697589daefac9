"""The lean optimiser pieces compute exactly what torch's own do."""

import copy

import torch

from rlpar.learning.optim import LeanAdam, clip_grad_norm


def make_params(seed):
    torch.manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(4))]


def test_lean_adam_matches_torch_adam_and_round_trips_state():
    ours, ref = make_params(0), make_params(0)
    opt = LeanAdam(ours, lr=1e-2, eps=1e-5)
    ref_opt = torch.optim.Adam(ref, lr=1e-2, eps=1e-5)
    for step in range(5):
        grads = [torch.randn_like(p) for p in ours]
        for p, q, g in zip(ours, ref, grads):
            p.grad, q.grad = g.clone(), g.clone()
        opt.param_groups[0]["lr"] = ref_opt.param_groups[0]["lr"] = 1e-2 / (step + 1)  # a schedule
        opt.step()
        ref_opt.step()
    for p, q in zip(ours, ref):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)

    restored = make_params(0)
    opt2 = LeanAdam(restored, lr=1e-2, eps=1e-5)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))  # as if read from a checkpoint file
    for p, q in zip(restored, ours):
        p.data.copy_(q.data)
    for p, q in zip(ours, restored):
        g = torch.ones_like(p)
        p.grad, q.grad = g.clone(), g.clone()
    opt.step()
    opt2.step()
    for p, q in zip(ours, restored):
        torch.testing.assert_close(p, q)
    assert float(opt2.state_dict()["step"][0]) == 6


def test_clip_grad_norm_matches_torch():
    ours, ref = make_params(1), make_params(1)
    for p, q in zip(ours, ref):
        g = torch.randn_like(p) * 5
        p.grad, q.grad = g.clone(), g.clone()
    total = clip_grad_norm(ours, 0.5)
    ref_total = torch.nn.utils.clip_grad_norm_(ref, 0.5)
    torch.testing.assert_close(total, ref_total)
    for p, q in zip(ours, ref):
        torch.testing.assert_close(p.grad, q.grad)
