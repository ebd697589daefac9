"""The torch side of a multi-agent model: one actor-critic per policy (rlpar.models.multi_agent)."""

from __future__ import annotations

from torch import nn


class PolicySet(nn.Module):
    """Policies by name; its state dict holds each under `policies.<name>.` (what the workers'
    MultiPolicyActing reads). A multi-agent algorithm learns each with its own optimiser."""

    def __init__(self, policies: dict[str, nn.Module]):
        super().__init__()
        self.policies = nn.ModuleDict(policies)
