"""Which answer head reads a Pri-* answer best from the class-subspace client's noisy slots.

The client of ``probe_slot_maps.py``'s "class subspace from noisy passes" row (exact centre, subspace fitted from
12 noisy passes over the training prompts); on its payloads, heads of :mod:`textfree.ppft.answer_head`'s kind
(:class:`~textfree.heads.classifier.AttributeClassifier`, mean slot + one-hot count, trained with fresh noise on
every pass, 100 passes) with a 2-layer MLP or linear (``hidden 0``), reading the mean slot as it is or standardised,
beside the probe's own linear reader. Each is scored on the held-out prompts (with --validation: a validation part of
the training rows instead) over 3 noise draws. Prints one accuracy per head.

    python benchmarks/probe_answer_heads.py --dataset slja --validation 0.2   # choose without the held-out part
    python benchmarks/probe_answer_heads.py --dataset slja

Needs the Pri-* data (``TEXTFREE_DATA``) and an encoder directory (default: the stage-1 run's).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_slot_maps import noisy_means, probe_data, probe_parser, reader_accuracy  # noqa: E402

from textfree.heads.classifier import AttributeAttackConfig, AttributeSpec, noisy_rows, train_attribute_attacker
from textfree.mechanisms import L2Laplace, center_slots, class_subspace, l2_normalize  # noqa: E402

HEADS = {  # name -> AttributeAttackConfig settings beside mean pooling, the count and 100 passes
    "MLP (the head before 2026-11-25)": {},
    "MLP, standardised": {"standardize": True},
    "MLP, standardised, no count": {"standardize": True, "count": False},
    "linear, standardised": {"standardize": True, "hidden": 0},
    "linear, standardised, no count": {"standardize": True, "hidden": 0, "count": False},
    "linear, as it is": {"hidden": 0},
}


def padded(slots: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-prompt slots [n_i, d] -> [N, S, d] with zero padding, and the mask [N, S]."""
    x = torch.zeros(len(slots), max(s.shape[0] for s in slots), slots[0].shape[1])
    mask = torch.zeros(x.shape[:2], dtype=torch.bool)
    for i, s in enumerate(slots):
        x[i, : s.shape[0]], mask[i, : s.shape[0]] = s, True
    return x, mask


def main() -> None:
    args = probe_parser(__doc__.splitlines()[0]).parse_args()
    scored, classes, train, train_answers, ytr, test, yte = probe_data(args)
    mech = L2Laplace(args.epsilon)

    center = torch.stack([s.double().mean(dim=0) for s in train]).mean(dim=0).float()
    gen = torch.Generator().manual_seed(args.seed + 5)
    noisy = torch.cat([noisy_means([center_slots(s, center) for s in train], None, mech, gen) for _ in range(12)])
    smap = torch.cat([center[None], class_subspace(noisy, train_answers * 12)])
    print(
        f"{args.dataset}: {len(train)} training / {len(test)} {scored} prompts, {len(classes)} training answers, "
        f"eps {args.epsilon:g}, k {args.k}, class subspace rank {smap.shape[0] - 1}"
    )
    acc = reader_accuracy(train, ytr, test, yte, smap, mech, len(classes), 60, args.seed)
    print(f"  the probe's linear reader (probe_slot_maps.py): {scored} answer accuracy {acc:.3f}", flush=True)

    xtr, mtr = padded([center_slots(s, smap) for s in train])
    xte, mte = padded([center_slots(s, smap) for s in test])
    spec = [AttributeSpec("answer", "categorical", tuple(classes))]
    targets = [{"answer": a} for a in train_answers]

    def noise(rows: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        return l2_normalize(mech.sample(rows.double(), generator=g)).float()

    for name, settings in HEADS.items():
        config = AttributeAttackConfig(**({"pooling": "mean", "count": True, "epochs": 100} | settings))
        head = train_attribute_attacker(
            xtr, mtr, targets, spec, config, noise=noise, generator=torch.Generator().manual_seed(args.seed)
        )
        accs = []
        for draw in range(3):
            x = noisy_rows(noise, xte, mte, torch.Generator().manual_seed(args.seed + 1000 + draw))
            with torch.no_grad():
                accs.append(float((head(x, mte)["answer"].argmax(dim=1) == yte).float().mean()))
        print(f"  head: {name}: {scored} answer accuracy {sum(accs) / len(accs):.3f}", flush=True)


if __name__ == "__main__":
    main()
