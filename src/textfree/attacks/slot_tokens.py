"""Slot-token inversion: read the tokens of each PPFT slot back with a classifier, no decoder at all.

A PPFT slot is the (normalised, noised) mean of the encoder's states of k consecutive tokens. This attacker learns,
for each position j < k of a slot, which encoder token sat there, and writes the guesses out slot by slot, in order.
It needs query access to the encoder (its own clean token states for its own text) and text to train on (public
text suffices: :data:`SLOT_TOKENS_REQUIRES`); the noise-aware variant also runs the public mechanism on its
training payloads (fresh noise every epoch), so it also needs the mechanism's parameters.

The classifier (:class:`SlotTokenInverter`): a 2-layer MLP on the released slot gives k query vectors; a query's
logits are its scaled cosine with every row of the encoder's own input-embedding table (frozen) plus a learned bias
per token. Scoring against the whole table (not a list of tokens seen in training) lets it name tokens its
training text never held, such as the pieces of a rare name. Targets past a prompt's end (the tail of its last slot,
filler slots of padded payloads) are the pad token, which the reconstruction drops with the other special tokens.

It is the learned counterpart of RAPT's per-token MLP (``blackbox``) for pooled payloads, and it needs no language
model: at this scale (a 6.8M-parameter local decoder) the decoder inverters cannot regenerate free text even from
clean payloads (docs/attacks.md), which says more about the decoder than about the payload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from .threat import ThreatModel, check_grant, register_attack

__all__ = [
    "SLOT_TOKENS_REQUIRES",
    "SlotTokenConfig",
    "SlotTokenInverter",
    "slot_targets",
    "train_slot_inverter",
    "slot_tokens_attack",
]

SLOT_TOKENS_REQUIRES = ThreatModel(encoder_queries=True, training_text="public")


@dataclass(frozen=True)
class SlotTokenConfig:
    """Training of the slot-token classifier."""

    hidden: int = field(default=768, metadata={"help": "Width of the 2-layer MLP."})
    epochs: int = field(
        default=12, metadata={"help": "Passes over the training slots (noise-aware: fresh noise each)."}
    )
    batch_size: int = field(default=256, metadata={"help": "Slots per optimizer step."})
    lr: float = field(default=2e-3, metadata={"help": "Peak AdamW learning rate (cosine decay to a tenth)."})
    scale: float = field(default=20.0, metadata={"help": "Initial logit scale of the cosine scores (learned)."})

    def __post_init__(self) -> None:
        for name in ("hidden", "epochs", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"SlotTokenConfig.{name} must be an integer >= 1, got {v!r}")
        for name in ("lr", "scale"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
                raise ValueError(f"SlotTokenConfig.{name} must be a finite number > 0, got {v!r}")


class SlotTokenInverter(torch.nn.Module):
    """Released slot [n, d] -> logits [n, k, V] over the encoder's vocabulary, one row per position in the slot."""

    def __init__(self, dim: int, k: int, hidden: int, table: torch.Tensor, scale: float = 20.0):
        super().__init__()
        self.k = k
        self.register_buffer("table", torch.nn.functional.normalize(table.detach().to(torch.float32), dim=-1))
        self.net = torch.nn.Sequential(
            torch.nn.Linear(dim, hidden),
            torch.nn.GELU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.GELU(),
            torch.nn.Linear(hidden, k * self.table.shape[1]),
        )
        self.log_scale = torch.nn.Parameter(torch.tensor(math.log(scale)))
        self.bias = torch.nn.Parameter(torch.zeros(self.table.shape[0]))

    def forward(self, slots: torch.Tensor) -> torch.Tensor:
        queries = self.net(slots.to(torch.float32)).view(slots.shape[0], self.k, -1)
        queries = torch.nn.functional.normalize(queries, dim=-1)
        return self.log_scale.exp() * queries @ self.table.T + self.bias

    @torch.no_grad()
    def invert(self, slots: torch.Tensor, *, pad_id: int | None = None, batch_size: int = 512) -> torch.Tensor:
        """Token ids [n, k] of each slot: a greedy assignment of distinct tokens to positions (``pad_id`` may repeat).

        A mean over a slot's tokens carries their order only through context, so two positions may find the same
        token most likely; taking each position's argmax would then write one token twice and drop the other.
        Instead the (position, token) pair of highest log-probability is fixed first, then the next among the free
        positions and the unused tokens, k times."""
        out = [
            self._assign(self(slots[i : i + batch_size]).log_softmax(-1), pad_id)
            for i in range(0, len(slots), batch_size)
        ]
        return torch.cat(out) if out else torch.zeros(0, self.k, dtype=torch.int64)

    def _assign(self, logp: torch.Tensor, pad_id: int | None) -> torch.Tensor:
        n, k, v = logp.shape
        logp = logp.clone()
        ids = torch.zeros(n, k, dtype=torch.int64)
        rows = torch.arange(n)
        for _ in range(k):
            best = logp.view(n, -1).argmax(-1)
            pos, tok = best // v, best % v
            ids[rows, pos] = tok
            logp[rows, pos, :] = -math.inf  # the position is taken
            reusable = tok == pad_id if pad_id is not None else torch.zeros(n, dtype=torch.bool)
            taken = rows[~reusable]
            logp[taken, :, tok[~reusable]] = -math.inf  # the token is used
        return ids


def slot_targets(ids: Sequence[torch.Tensor], slots: Sequence[int], k: int, pad_id: int) -> torch.Tensor:
    """Token ids per released slot: text i's ids (its whole tokenization, special tokens included) cut into rows of
    k and padded with ``pad_id`` to ``slots[i]`` rows (the tail of the last slot, filler slots); stacked [sum, k]."""
    rows = []
    for t, n in zip(ids, slots):
        t = torch.as_tensor(t, dtype=torch.int64).flatten()
        if math.ceil(len(t) / k) > n:
            raise ValueError(
                f"a text of {len(t)} tokens needs {math.ceil(len(t) / k)} slots of k={k}, its payload has {n}"
            )
        row = torch.full((n * k,), pad_id, dtype=torch.int64)
        row[: len(t)] = t
        rows.append(row.view(n, k))
    return torch.cat(rows) if rows else torch.zeros(0, k, dtype=torch.int64)


def train_slot_inverter(
    releases: Callable[[int], torch.Tensor],
    targets: torch.Tensor,
    table: torch.Tensor,
    k: int,
    config: SlotTokenConfig,
    *,
    generator: torch.Generator,
    progress: bool = False,
) -> tuple[SlotTokenInverter, dict[str, float]]:
    """Train on ``releases(epoch) -> [n, d]`` (the attacker's own payload slots of epoch ``epoch``: clean for the
    noise-unaware variant, freshly noised for the noise-aware one) against ``targets`` [n, k] (:func:`slot_targets`).

    Returns the model (in eval mode) and ``{first_loss, final_loss, steps}`` (final: the mean over the last epoch)."""
    from tqdm.auto import tqdm

    # Its own few lines of loop rather than textfree.training.fit: it trains in memory in seconds, writes no run
    # directory or checkpoint, and draws its batches and noise from one generator in the order every committed
    # attack figure was made with (fit's seeded data order would redraw them all).
    first = releases(0)
    if first.ndim != 2 or len(first) != len(targets) or targets.shape[1:] != (k,):
        raise ValueError(
            f"releases give {tuple(first.shape)} for targets {tuple(targets.shape)} (need [n, d] and [n, {k}])"
        )
    torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    model = SlotTokenInverter(first.shape[1], k, config.hidden, table, config.scale)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    total = config.epochs * math.ceil(len(targets) / config.batch_size)
    bar = tqdm(total=total, desc="slot-token inverter", unit="step", disable=not progress)
    step, losses = 0, []
    model.train()
    for epoch in range(config.epochs):
        x = first if epoch == 0 else releases(epoch)
        order = torch.randperm(len(targets), generator=generator)
        for start in range(0, len(order), config.batch_size):
            idx = order[start : start + config.batch_size]
            for group in opt.param_groups:  # cosine decay to a tenth
                group["lr"] = config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / total)))
            logits = model(x[idx])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets[idx].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}", epoch=epoch)
    bar.close()
    model.eval()
    last = losses[-math.ceil(len(targets) / config.batch_size) :]
    return model, {"first_loss": losses[0], "final_loss": sum(last) / len(last), "steps": float(step)}


def _texts(ids: torch.Tensor, lengths: Sequence[int], tokenizer: Any) -> list[str]:
    """Token guesses [sum(lengths), k] -> one text per payload row, special tokens dropped."""
    special = set(tokenizer.all_special_ids)
    out, start = [], 0
    for n in lengths:
        guess = [int(t) for t in ids[start : start + n].flatten() if int(t) not in special]
        out.append(tokenizer.decode(guess, clean_up_tokenization_spaces=True).strip())
        start += n
    return out


@register_attack(
    "slot_tokens",
    requires=SLOT_TOKENS_REQUIRES,
    description="a classifier of the tokens pooled into each PPFT slot (no decoder), trained from encoder queries",
)
def slot_tokens_attack(model: SlotTokenInverter, payload: Any, tokenizer: Any, *, threat: ThreatModel) -> list[str]:
    """One reconstruction per payload row: each slot's token guesses in order, special tokens dropped."""
    check_grant("slot_tokens", SLOT_TOKENS_REQUIRES, threat)
    lengths = list(payload.lengths)
    rows = torch.cat([payload.vectors[i, :n] for i, n in enumerate(lengths)]) if lengths else payload.vectors[:0, 0]
    return _texts(model.invert(rows, pad_id=tokenizer.pad_token_id), lengths, tokenizer)
