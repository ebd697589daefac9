"""`rlpar export RUN_DIR --format onnx|torchscript --out FILE`: a run's greedy policy as one graph
that holds everything between the environment's observation and its action, so that it runs where
rlpar does not (onnxruntime in a game engine, a robot's controller, a service in another
language).

The graph (ExportedPolicy) is the learner's own network with the checkpoint's weights, between
the steps the acting copies take around it (rlpar.models.acting): the observations flattened
(a Box's are reshaped; Dict, Tuple and Discrete observations come as training's flat rows, the
sidecar names their columns), whitened with the checkpoint's statistics and clipped, the network
(which masks actions by the observation's mask itself), the greedy action (argmax, a factor's
argmax, the Gaussian mean or the tanh actor's action), mapped to the action space as
rlpar.envs.spaces.ActionMapper maps it. A recurrent network takes its state ([N, state_size], zero
at an episode's start) and returns the next one. Every dimension but the batch's is fixed.

Beside FILE, `FILE.json` describes it: the spaces, the inputs and outputs (names, shapes,
dtypes), the rlpar version and the run and checkpoint it came from. A multi-agent run exports one
file per policy, `STEM.<policy>.SUFFIX`. The graph computes in float32 where the acting copy
computes in float64: actions agree within 1e-4 (tests/runs/test_export.py checks it with
onnxruntime, in a process that never imports torch).
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlpar.serving.policy import Policy, load_policy

FORMATS = ("onnx", "torchscript")
SIDECAR_SUFFIX = ".json"
OBS, STATE, ACTION, NEXT_STATE = "obs", "state", "action", "next_state"
EXAMPLE_BATCH = 2  # torch.export specialises a dimension of size 1: the example batch must be larger


class ExportedPolicy(nn.Module):
    """A policy's greedy action for raw observations, in torch: `forward(obs)` -> action, or
    `forward(obs, state)` -> (action, next state) for a recurrent network."""

    mean: torch.Tensor | None  # buffers (register_buffer), declared for the type checker
    inv_std: torch.Tensor | None
    starts: torch.Tensor
    low: torch.Tensor
    half_range: torch.Tensor
    bounded: torch.Tensor

    def __init__(self, policy: Policy):
        super().__init__()
        spec = policy.spec
        self.kind = spec.kind
        self.recurrent = spec.recurrent is not None
        self.network = spec.build().requires_grad_(False).eval()
        keys = set(self.network.state_dict())
        self.network.load_state_dict(
            {k: torch.as_tensor(np.asarray(v)) for k, v in policy.weights.items() if k in keys}
        )
        self.obs_shape = _obs_input_shape(policy)
        self.obs_dtype = torch.uint8 if spec.obs_dtype == "uint8" else torch.float32
        self.padding = spec.obs_dim - int(np.prod(self.obs_shape))  # a global state the actor does not read
        whiten = spec.normalize_obs and hasattr(policy.acting, "obs_mean")
        self.register_buffer("mean", torch.as_tensor(policy.acting.obs_mean) if whiten else None)
        self.register_buffer("inv_std", torch.as_tensor(policy.acting.obs_inv_std) if whiten else None)
        self.clip_obs = float(getattr(policy.acting, "clip_obs", 0.0))
        action = spec.action
        self.action_info = action
        self.action_shape = tuple(action.shape)
        if action.factored:
            self.register_buffer("starts", torch.as_tensor(action.starts, dtype=torch.int64))
        elif not action.discrete:
            low, half_range, bounded = policy.mapper.box_scaling
            self.register_buffer("low", torch.as_tensor(low, dtype=torch.float32))
            self.register_buffer("half_range", torch.as_tensor(half_range, dtype=torch.float32))
            self.register_buffer("bounded", torch.as_tensor(bounded))
        self.state_size = policy.state_size

    def forward(self, obs: torch.Tensor, state: torch.Tensor | None = None):
        rows = obs.reshape(obs.shape[0], -1)
        if self.padding:
            rows = torch.cat([rows, rows.new_zeros(rows.shape[0], self.padding)], dim=1)
        if self.mean is not None and self.inv_std is not None:
            rows = torch.clamp((rows - self.mean) * self.inv_std, -self.clip_obs, self.clip_obs)
        outputs, next_state = self._outputs(rows, state)
        action = self._action(outputs)
        return action if state is None else (action, next_state)

    def _outputs(self, rows: torch.Tensor, state: torch.Tensor | None):
        """The network's policy outputs (actor outputs, Q-values, or the tanh actor's action) and
        the next state (None: feed-forward)."""
        if self.recurrent:
            assert state is not None  # a recurrent export takes its state
            outputs, next_state = self.network.acting_outputs(rows, state)
            return outputs[0], next_state
        if self.kind == "actor_critic":
            return self.network.towers(rows)[0], None
        return self.network(rows), None  # Q-values, or the actor's tanh(mean)

    def _action(self, out: torch.Tensor) -> torch.Tensor:
        """The greedy action in the action space's terms (as PolicyChoice / EpsilonGreedyChoice
        with no noise, then ActionMapper.to_env)."""
        action = self.action_info
        if action.factored:
            chosen = self.network.factor_logits(out).argmax(dim=-1) + self.starts
            return chosen.reshape((out.shape[0], *self.action_shape))
        if action.discrete:
            return out.argmax(dim=-1) + action.start
        clipped = torch.clamp(out, -1.0, 1.0)
        scaled = torch.where(self.bounded, self.low + (clipped + 1.0) * self.half_range, out)
        return scaled.reshape((out.shape[0], *self.action_shape))

    def example_inputs(self, batch: int = EXAMPLE_BATCH) -> tuple[torch.Tensor, ...]:
        obs = torch.zeros((batch, *self.obs_shape), dtype=self.obs_dtype)
        return (obs, torch.zeros(batch, self.state_size)) if self.recurrent else (obs,)


def _obs_input_shape(policy: Policy) -> tuple[int, ...]:
    """One observation's shape in the graph: a Box's own (no agent index appended), else its
    flattened row (the agent's one-hot index last, with env.agent_id)."""
    space = policy.observation_space
    if isinstance(space, gym.spaces.Box) and not policy.agents:
        return tuple(int(s) for s in space.shape)
    return (policy.input_width + len(policy.agents),)


def export_run(
    run_dir: str | Path, fmt: str, out: str | Path, *, checkpoint: str | Path | None = None, trust: bool = False
) -> list[Path]:
    """Export the greedy policy (or each policy) of a run's checkpoint to `out` in `fmt`
    (`onnx` or `torchscript`), each with its sidecar; returns the files written."""
    if fmt not in FORMATS:
        raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    out = Path(out)
    loaded = load_policy(run_dir, checkpoint, trust=trust)
    if isinstance(loaded, Policy):
        targets = [(loaded, out)]
    else:
        targets = [(policy, out.with_name(f"{out.stem}.{name}{out.suffix}")) for name, policy in loaded.items()]
    for policy, path in targets:
        export_policy(policy, fmt, path)
    return [path for _, path in targets]


def export_policy(policy: Policy, fmt: str, out: Path) -> None:
    """One policy's graph to `out`, and its description to `out` + `.json`."""
    model = ExportedPolicy(policy).eval()
    inputs = model.example_inputs()
    names = [OBS, STATE][: len(inputs)]
    outputs = [ACTION, NEXT_STATE][: len(inputs)]
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "onnx":
        _export_onnx(model, inputs, names, outputs, out)
    else:
        with warnings.catch_warnings(), torch.no_grad():
            # torch deprecates TorchScript for torch.export; libtorch (C++) still loads it
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            # traced again on another batch size: a size the trace fixed is an error here, not a wrong file
            torch.jit.trace(model, inputs, check_inputs=[model.example_inputs(EXAMPLE_BATCH + 1)]).save(str(out))
    sidecar = {**policy.describe(), "format": fmt, **_signature(model, names, outputs), **_rows(policy, model)}
    Path(f"{out}{SIDECAR_SUFFIX}").write_text(json.dumps(sidecar, indent=2) + "\n")


def _export_onnx(model: ExportedPolicy, inputs: tuple, names: list[str], outputs: list[str], out: Path) -> None:
    """torch.onnx.export's torch.export-based path (dynamo=True, torch's default since 2.9; it
    needs onnxscript): the TorchScript-based one is deprecated, and it traces, which fixes sizes
    read in Python (the batch of a reshape) unless each is marked. The batch is a symbolic dimension."""
    try:
        import onnxscript  # noqa: F401  (torch.onnx writes the graph through it)
    except ImportError:
        from rlpar.runtime.evaluate_run import EvaluateError

        raise EvaluateError(
            "--format onnx needs onnx and onnxscript: pip install 'rlpar[export]' (or requirements.txt's pins)", 1
        ) from None
    batch = torch.export.Dim("batch")
    shapes = tuple({0: batch} for _ in inputs)
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "torchvision is not installed": operators rlpar does not use
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                inputs,
                str(out),
                dynamo=True,
                input_names=names,
                output_names=outputs,
                dynamic_shapes=shapes,
                verbose=False,
                optimize=True,
            )
    finally:
        quiet.setLevel(level)
    _refuse_a_fixed_batch(out)


def _refuse_a_fixed_batch(path: Path) -> None:
    """torch.onnx falls back to a graph of the example's batch size when the code fixes it (a
    len() of a tensor): refused, rather than a file that fails on any other batch."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    fixed = [item.name for item in [*graph.input, *graph.output] if not item.type.tensor_type.shape.dim[0].dim_param]
    if fixed:
        path.unlink()
        raise RuntimeError(f"the exported graph fixed the batch size of {', '.join(fixed)} (a bug of rlpar's export)")


def _rows(policy: Policy, model: ExportedPolicy) -> dict:
    """How an observation becomes the graph's `obs` where that is a flat row, not the space's shape."""
    if isinstance(policy.observation_space, gym.spaces.Box) and not policy.agents:
        return {}
    return {
        "obs_rows": {
            "layout": "the observation flattened as training's rows: Box values in order, Discrete and "
            "MultiDiscrete one-hot, Dict keys and Tuple items concatenated in the space's order"
            + (", then the agent's one-hot index among `agents`" if policy.agents else ""),
            "columns": [list(key) for key in getattr(policy.spec, "observation_keys", ())],  # a Dict's keys
            "width": int(np.prod(model.obs_shape)),
        }
    }


def _signature(model: ExportedPolicy, names: list[str], outputs: list[str]) -> dict:
    """The graph's inputs and outputs: names, shapes (`batch` first) and dtypes."""
    obs_dtype = "uint8" if model.obs_dtype == torch.uint8 else "float32"
    action = model.action_info
    action_shape = [] if action.discrete and not action.factored else list(model.action_shape)
    state = {"shape": ["batch", model.state_size], "dtype": "float32"}
    return {
        "inputs": [{"name": OBS, "shape": ["batch", *model.obs_shape], "dtype": obs_dtype}]
        + [{"name": name, **state} for name in names[1:]],
        "outputs": [
            {"name": ACTION, "shape": ["batch", *action_shape], "dtype": "int64" if action.discrete else "float32"}
        ]
        + [{"name": name, **state} for name in outputs[1:]],
    }
