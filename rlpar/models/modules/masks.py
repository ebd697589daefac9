"""Invalid-action masks in the torch networks (rlpar.models.action_masks has the design and the
numpy side): the networks' outputs for masked actions become MASKED_LOGIT, read from the mask's
columns of the observation rows, so every loss, target and acting copy built on those outputs
excludes them. The buffers here are not in the state dict: checkpoints and the acting copies'
weights are the same with and without masks."""

from __future__ import annotations

import torch
from torch import nn

from rlpar.models.action_masks import MASKED_LOGIT, factor_membership


class ActionMasking(nn.Module):
    """Mixed into a network: `_init_action_mask(spec)` in its constructor, then `masked(out, obs)`
    on its policy logits or Q-values and `network_inputs(obs)` on the rows it reads."""

    mask_columns: tuple[int, int] | None = None
    mask_membership: torch.Tensor | None
    input_keep: torch.Tensor | None

    def _init_action_mask(self, spec) -> None:
        self.mask_columns = getattr(spec, "mask_columns", None)
        membership = None if self.mask_columns is None else torch.as_tensor(factor_membership(spec.action))
        self.register_buffer("mask_membership", membership, persistent=False)
        keep = getattr(spec, "input_keep", None)
        self.register_buffer("input_keep", None if keep is None else torch.as_tensor(keep), persistent=False)

    def network_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """The rows the network reads: the mask's columns zeroed unless it reads them."""
        return obs if self.input_keep is None else obs * self.input_keep.to(obs.dtype)

    def masked(self, out: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """`out` [..., size] with masked actions' entries MASKED_LOGIT (float32 under autocast:
        MASKED_LOGIT is not finite in float16); a factor with no legal choice is left unmasked."""
        if self.mask_columns is None:
            return out
        assert self.mask_membership is not None  # set with mask_columns
        start, stop = self.mask_columns
        allowed = obs[..., start:stop] > 0.5
        membership = self.mask_membership
        counts = allowed.to(membership.dtype) @ membership
        legal = allowed | ((counts == 0).to(membership.dtype) @ membership.T > 0)
        if out.dtype in (torch.bfloat16, torch.float16):
            out = out.float()
        return out.masked_fill(~legal, MASKED_LOGIT)
