"""rlpar's Adam is torch's, with its state up front; checkpoints of the former hand-written Adam load."""

import copy

import torch

from rlpar.learning.optimization.optim import adam, adam_state, load_optimizer_state, optimizer_state


def make_params(seed):
    torch.manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(4))]


def set_grads(*param_lists, seed):
    torch.manual_seed(seed)
    grads = [torch.randn_like(p) for p in param_lists[0]]
    for params in param_lists:
        for p, g in zip(params, grads):
            p.grad = g.clone()


def test_adam_is_torchs_fused_adam_with_its_state_created_before_the_first_step():
    ours, ref = make_params(0), make_params(0)
    opt, ref_opt = adam(ours, lr=1e-2, eps=1e-5), torch.optim.Adam(ref, lr=1e-2, eps=1e-5)
    assert isinstance(opt, torch.optim.Adam) and opt.param_groups[0]["fused"]
    exp_avgs, exp_avg_sqs, steps = adam_state(opt)  # the tensors a compiled step and Hogwild workers share
    assert [t.shape for t in exp_avgs] == [t.shape for t in exp_avg_sqs] == [p.shape for p in ours]
    assert [float(s) for s in steps] == [0.0, 0.0]
    for step in range(5):
        set_grads(ours, ref, seed=step)
        opt.param_groups[0]["lr"] = ref_opt.param_groups[0]["lr"] = 1e-2 / (step + 1)  # a schedule
        opt.step()
        ref_opt.step()
    for p, q in zip(ours, ref):
        torch.testing.assert_close(p, q)
    assert exp_avgs[0] is adam_state(opt)[0][0]  # stepped in place
    assert [float(s) for s in steps] == [5.0, 5.0]


def former_lean_adam_state(opt) -> dict:
    """What rlpar's former LeanAdam wrote into checkpoints, for the same optimiser state."""
    exp_avgs, exp_avg_sqs, steps = adam_state(opt)
    return {"lr": opt.param_groups[0]["lr"], "exp_avg": [t.clone() for t in exp_avgs],
            "exp_avg_sq": [t.clone() for t in exp_avg_sqs], "step": [t.clone() for t in steps]}


def restored_copy(params, state, *, via_loader: bool):
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = adam(copies, lr=1.0, eps=1e-5)
    (load_optimizer_state if via_loader else type(opt).load_state_dict)(opt, copy.deepcopy(state))
    return copies, opt


def test_state_round_trips_and_checkpoints_of_the_former_lean_adam_load():
    ours = make_params(0)
    opt = adam(ours, lr=1e-2, eps=1e-5)
    for step in range(3):
        set_grads(ours, seed=step)
        opt.step()
    opt.param_groups[0]["lr"] = 3e-3
    for state in (opt.state_dict(), former_lean_adam_state(opt)):  # as if read from a checkpoint file
        reference, ref_opt = restored_copy(ours, opt.state_dict(), via_loader=False)
        restored, opt2 = restored_copy(ours, state, via_loader=True)
        assert opt2.param_groups[0]["lr"] == 3e-3
        assert [float(s) for s in adam_state(opt2)[2]] == [3.0, 3.0]
        set_grads(reference, restored, seed=9)
        ref_opt.step()
        opt2.step()
        for p, q in zip(reference, restored):
            torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_a_kept_state_is_a_snapshot_and_loading_it_twice_shares_no_tensor():
    """torch's state_dict holds the optimiser's own tensors and load_state_dict adopts the ones
    it is given: a state kept to return to (or two learners loaded from one) must not follow the steps."""
    ours = make_params(0)
    opt = adam(ours, lr=1e-2)
    set_grads(ours, seed=0)
    opt.step()
    kept = optimizer_state(opt)
    snapshot = copy.deepcopy(kept)
    first, second = adam(make_params(1), lr=1.0), adam(make_params(1), lr=1.0)
    load_optimizer_state(first, kept)
    load_optimizer_state(second, kept)
    assert adam_state(first)[0][0] is not adam_state(second)[0][0]
    set_grads(ours, seed=1)
    opt.step()
    for p in first.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    first.step()
    for saved, now in zip(snapshot["state"].values(), kept["state"].values()):
        assert all(torch.equal(saved[key], now[key]) for key in ("step", "exp_avg", "exp_avg_sq"))
    assert torch.equal(adam_state(second)[0][0], snapshot["state"][0]["exp_avg"])


def test_polyak_moves_each_target_parameter_tau_of_the_way_to_the_online_one():
    from rlpar.learning.optimization.optim import polyak

    torch.manual_seed(0)
    target, online = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    expected = [0.9 * t.detach() + 0.1 * o.detach() for t, o in zip(target.parameters(), online.parameters())]
    before = [o.detach().clone() for o in online.parameters()]
    polyak(target, online, 0.1)
    for t, e, o, b in zip(target.parameters(), expected, online.parameters(), before):
        torch.testing.assert_close(t.detach(), e)
        assert torch.equal(o.detach(), b)  # the online network is left as it was
