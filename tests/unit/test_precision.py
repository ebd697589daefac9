"""algo.precision: bf16 and fp16 learner steps on a real CartPole batch (autocast really lowers
the matmuls, the weights and their update stay float32 and near fp32's), fp16's loss scaler
(an overflow skips the step and lowers the scale), A3C's bf16 workers, and validation."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlpar.algos.ppo import LEARNING_ARRAYS
from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.factory import resolve_env_spec
from rlpar.learning.losses.actor_critic import ActorCriticLoss
from rlpar.learning.optimization.precision import native_bf16, resolve_precision
from rlpar.config.changes import config_mismatches
from rlpar.runtime.build import build_trainer
from rlpar.runtime.checkpoint import load_checkpoint
from rlpar.learning.estimators.batch_tensors import valid_step_tensors
from rlpar.sampling.gradient_worker import GradientWorker
from tests.rollouts import cartpole_rollout
from tests.unit.test_a2c import GAMMA, make_a2c
from tests.unit.test_ppo_options import WHOLE_BATCH, make_ppo, one_torch_thread  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def rollout():
    """(policy spec, batch): 4 CartPole environments for 32 steps, episode ends included."""
    return cartpole_rollout(make_ppo)


def flat(parameters) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in parameters])


def weight_change(rollout, precision: str, **options) -> torch.Tensor:
    """How one PPO update (whole-batch gradient steps) moves the weights, in `precision`."""
    policy_spec, batch = rollout
    ppo = make_ppo(policy_spec, precision=precision, minibatch_size=WHOLE_BATCH, compile=False, **options)
    before = flat(ppo.parameters)
    stats = ppo.update(batch)
    assert stats["nonfinite_updates"] == 0
    assert all(p.dtype == torch.float32 for p in ppo.parameters)  # master weights stay float32
    assert all(t.dtype == torch.float32 for state in ppo.optimizer.state.values() for t in state.values())
    return flat(ppo.parameters) - before


def test_a_bf16_ppo_update_moves_the_weights_close_to_but_not_exactly_as_fp32(rollout):
    fp32, bf16 = weight_change(rollout, "fp32"), weight_change(rollout, "bf16")
    assert not torch.equal(fp32, bf16)  # the forward really ran in lower precision
    assert torch.linalg.vector_norm(bf16 - fp32) < 0.01 * torch.linalg.vector_norm(fp32)
    assert torch.nn.functional.cosine_similarity(fp32, bf16, dim=0) > 0.9999


def test_an_fp16_ppo_update_moves_the_weights_close_to_fp32_once_the_scale_fits(rollout):
    """A scale that fits this loss from the start (the default 2^16 overflows its first steps)."""
    policy_spec, batch = rollout
    fp32 = weight_change(rollout, "fp32")
    ppo = make_ppo(policy_spec, precision="fp16", minibatch_size=WHOLE_BATCH, compile=False)
    ppo.step.scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
    before = flat(ppo.parameters)
    stats = ppo.update(batch)
    assert (stats["nonfinite_updates"], stats["loss_scale"]) == (0, 256.0)
    fp16 = flat(ppo.parameters) - before
    assert not torch.equal(fp32, fp16)
    assert torch.linalg.vector_norm(fp16 - fp32) < 0.002 * torch.linalg.vector_norm(fp32)


class MatmulDtypes(TorchDispatchMode):
    """The dtypes of the batched matrix products torch dispatches (the MLP's layers are baddbmm)."""

    def __init__(self):
        super().__init__()
        self.dtypes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten.baddbmm.default, torch.ops.aten.bmm.default):
            self.dtypes.append(out.dtype)
        return out


def learning_data(ppo, batch) -> dict:
    inputs = ppo.learning_inputs(batch)
    data = valid_step_tensors({name: inputs[name] for name in LEARNING_ARRAYS}, inputs["valid"], ppo.device)
    return {**data, "behaviour_weights": torch.ones_like(data["old_logp"])}


@pytest.mark.parametrize("precision, dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_the_gradient_steps_matmuls_run_in_the_precision_and_the_loss_in_float32(rollout, precision, dtype):
    policy_spec, batch = rollout
    ppo = make_ppo(policy_spec, precision=precision, compile=False)
    data = learning_data(ppo, batch)
    with MatmulDtypes() as seen:
        loss, p_loss, v_loss, logp = ppo.gradient_step(**data)
    assert len(seen.dtypes) >= 4 and set(seen.dtypes) == {dtype}  # forward and backward products
    assert loss.dtype == p_loss.dtype == v_loss.dtype == logp.dtype == torch.float32  # log-softmax too
    assert all(p.grad.dtype == torch.float32 for p in ppo.parameters)


def test_an_fp16_loss_that_overflows_skips_the_step_counts_it_and_halves_the_scale(rollout):
    policy_spec, batch = rollout
    ppo = make_ppo(policy_spec, precision="fp16", compile=False, max_grad_norm=1e9)
    data = learning_data(ppo, batch)
    before = flat(ppo.parameters)
    scale = ppo.step.scaler.get_scale()
    with ppo.step.autocast():
        loss = ppo.minibatch_loss(**data)[0]
    ppo.step(loss * 1e6)  # x 2^16: gradients far past float16's 65504
    assert torch.equal(flat(ppo.parameters), before)
    assert ppo.step.metrics() == {"nonfinite_updates": 1, "loss_scale": scale / 2}
    # a loss that fits: applied, with the gradient unscaled before the clip (fp32's, clipped alike)
    with ppo.step.autocast():
        loss = ppo.minibatch_loss(**data)[0]
    ppo.step(loss * 1e-3)
    assert not torch.equal(flat(ppo.parameters), before)
    assert (ppo.step.nonfinite_updates, ppo.step.consecutive_nonfinite) == (1, 0)
    fp16_grad = flat(p.grad for p in ppo.parameters)
    reference = make_ppo(policy_spec, compile=False, max_grad_norm=1e9)
    reference.step(reference.minibatch_loss(**data)[0] * 1e-3)
    fp32_grad = flat(p.grad for p in reference.parameters)
    assert torch.linalg.vector_norm(fp16_grad - fp32_grad) < 0.005 * torch.linalg.vector_norm(fp32_grad)


def test_an_a3c_workers_bf16_gradient_is_float32_and_near_its_fp32_gradient():
    policy_spec, batch = cartpole_rollout(make_a2c)
    weights = make_a2c(policy_spec).get_weights()
    gradients = {}
    for precision in ("auto", "fp32", "bf16"):
        worker = GradientWorker(env_spec=resolve_env_spec(id="CartPole-v1"), policy_spec=policy_spec, num_envs=1,
                                rollout_length=4, seed=0, objective=ActorCriticLoss(gamma=GAMMA), precision=precision)
        try:
            worker.adopt(weights, version=0)
            gradients[precision] = np.concatenate([g.reshape(-1) for g in worker.gradients(batch)[0]])
        finally:
            worker.close()
    fp32, bf16 = gradients["fp32"], gradients["bf16"]
    assert bf16.dtype == np.float32 and not np.array_equal(fp32, bf16)
    assert np.linalg.norm(bf16 - fp32) < 0.02 * np.linalg.norm(fp32)


@pytest.mark.parametrize("overrides, problem", [
    (("algo.precision=fp8",), "algo.precision: 'fp8' is not one of auto, fp32, bf16, fp16 (what ppo learns in)"),
    (("algo=a3c", "algo.precision=fp16"), "algo.precision: 'fp16' is not one of auto, fp32, bf16 (what a3c learns in)"),
])
def test_a_precision_the_algorithm_does_not_learn_in_is_refused_in_one_line(make_cfg, overrides, problem):
    with pytest.raises(ConfigError) as refused:
        validate_config(make_cfg(*overrides), check_env=False)
    assert refused.value.problems == [problem]
    for precision in ("auto", "fp32", "bf16"):
        validate_config(make_cfg(*overrides[:-1], f"algo.precision={precision}"), check_env=False)


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as cpuinfo:
        return set(cpuinfo.read().split())


def test_auto_precision_is_bf16_only_for_image_models_on_native_bf16_hardware():
    """The rule, with this machine's answer read independently of the code under test."""
    native = bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
    assert native_bf16("cpu") is native
    assert resolve_precision("auto", images=True, device="cpu", allowed=("fp32", "bf16")) == ("bf16" if native else "fp32")
    assert resolve_precision("auto", images=False, device="cpu", allowed=("fp32", "bf16")) == "fp32"
    assert resolve_precision("auto", images=True, device="cpu", allowed=("fp32",)) == "fp32"
    assert resolve_precision("fp16", images=False, device="cpu", allowed=("fp32",)) == "fp16"  # kept: validation refuses it


@pytest.mark.parametrize("env_overrides, images", [(("env.id=CartPole-v1",), False),
                                                   (("env=atari", "env.id=ALE/Pong-v5", "envs_per_worker=1"), True)])
def test_a_run_resolves_auto_precision_before_its_learner_is_built(make_cfg, tmp_path, env_overrides, images):
    """What the learner steps in: fp32 for an MLP; for a CNN, bf16 where this CPU has it."""
    trainer = build_trainer(make_cfg(*env_overrides, "total_steps=1000", run_dir=tmp_path / "run"))
    try:
        expected = "bf16" if images and native_bf16("cpu") else "fp32"
        assert trainer.algorithm.learner.step.precision == expected
    finally:
        trainer.close()


def test_auto_stays_auto_in_the_run_config_and_checkpoints_so_the_run_resumes(make_cfg, tmp_path):
    """What the user asked is what the run keeps: resolving it for the learner must not make the
    checkpoint's config differ from config.yaml (a resume would be refused)."""
    import yaml

    run_dir = tmp_path / "r"
    trainer = build_trainer(make_cfg("env=atari", "env.id=ALE/Pong-v5", "envs_per_worker=1", "algo.rollout_length=8",
                                     "algo.minibatch_size=8", run_dir=run_dir))
    try:
        trainer.train()
        path = trainer.save()
    finally:
        trainer.close()
    saved = load_checkpoint(path)["config"]
    assert saved["algo"]["precision"] == "auto"
    assert config_mismatches(yaml.safe_load((run_dir / "config.yaml").read_text()), saved) == []
