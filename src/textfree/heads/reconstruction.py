"""RAPT's privatized-token reconstruction head (Li et al., section III-B2).

Two linear layers, with no non-linearity between them, map a model's hidden state g at a plain token's position to a
distribution over a reconstruction vocabulary V_r: ``p = softmax(W_down (W_up g))`` with ``W_up`` [c, h] and
``W_down`` [|V_r|, c]. The loss is the mean cross-entropy of the plain tokens' indices in V_r. The head only trains:
it is dropped at inference, so a served model never holds it.
"""

from __future__ import annotations

import torch

__all__ = ["ReconstructionHead"]


class ReconstructionHead(torch.nn.Module):
    """``W_down(W_up(g))``: hidden width ``hidden`` -> ``bottleneck`` (the paper's c = 96) -> ``vocab_size`` logits."""

    def __init__(self, hidden: int, vocab_size: int, bottleneck: int = 96) -> None:
        super().__init__()
        for name, value in (("hidden", hidden), ("vocab_size", vocab_size), ("bottleneck", bottleneck)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ReconstructionHead: {name} must be an integer >= 1, got {value!r}")
        self.up = torch.nn.Linear(hidden, bottleneck)
        self.down = torch.nn.Linear(bottleneck, vocab_size)

    @property
    def vocab_size(self) -> int:
        return self.down.out_features

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """Logits [..., |V_r|] of hidden states [..., h]."""
        return self.down(self.up(states))

    def loss(self, hidden: torch.Tensor, positions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of ``targets`` [B, m] (indices in V_r; -100: no target) read at ``positions`` [B, m]
        (indices into the sequence of ``hidden`` [B, T, h])."""
        if positions.shape != targets.shape or positions.dim() != 2 or hidden.dim() != 3:
            raise ValueError(
                f"ReconstructionHead.loss: hidden [B, T, h], positions and targets [B, m], got {tuple(hidden.shape)}, "
                f"{tuple(positions.shape)}, {tuple(targets.shape)}"
            )
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= hidden.shape[1]):
            raise ValueError(f"ReconstructionHead.loss: positions must lie in [0, {hidden.shape[1]})")
        index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
        states = torch.gather(hidden, 1, index)
        logits = self(states)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
