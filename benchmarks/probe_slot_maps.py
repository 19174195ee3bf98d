"""How much of a Pri-* answer a linear reader gets from noisy slots, per client slot map.

The client maps each unit slot before the noise: as encoded (PPFT), centred (``unit(unit(v) - c)``), centred on
the class subspace fitted from noisy or from clean payloads (:mod:`textfree.mechanisms.subspace`), or centred on
the top principal directions of the centred slots (no labels); with --ranks also on the strongest m directions of
the noisy-pass class subspace alone (does a smaller subspace, with less of the noise in it, read better?); with
--repeat-mean each map also with every slot of a prompt replaced by the prompt's unit mean slot after the map
(the client's ``repeat_mean``: s noisy copies of one vector instead of s different ones).
For each map a logistic regression on the mean of a prompt's noisy renormalised slots is trained with fresh noise
on every pass over the training prompts and scored on the held-out prompts (with --validation: on a validation part
of the training rows instead) over a few noise draws (a prompt whose answer never occurs in training counts as
wrong).
The centre and the bases come from the training prompts without privacy noise of their own: this measures what a
map gives a reader, not a release. Prints one accuracy per map.

    python benchmarks/probe_slot_maps.py --dataset slja --encoder runs/stage1/encoder --max-tokens 192
    python benchmarks/probe_slot_maps.py --dataset ddx --encoder runs/stage1/encoder --max-tokens 128
    python benchmarks/probe_slot_maps.py --dataset slja --max-tokens 192 --validation 0.2   # choose without the
                                                                                            # held-out part
    python benchmarks/probe_slot_maps.py --dataset slja --validation 0.2 --ranks 4,8,16,24,32
    python benchmarks/probe_slot_maps.py --dataset slja --validation 0.2 --repeat-mean

Needs the Pri-* data (``TEXTFREE_DATA``) and an encoder directory.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from textfree.data import normalize_answer, ppft_split  # noqa: E402
from textfree.encoders import ContextualEncoder  # noqa: E402
from textfree.mechanisms import L2Laplace, center_slots, class_subspace, k_pool, l2_normalize, repeat_mean_slots  # noqa: E402


def prompt_slots(encoder, records, k: int) -> tuple[list[torch.Tensor], list[str]]:
    """Each distinct private text's unit slots [n, d] and its answer (by normalised text)."""
    answers: dict[str, str] = {}
    for r in records:
        answers.setdefault(r.context, normalize_answer(r.options[r.answer_index]))
    texts = list(answers)
    slots = []
    for start in range(0, len(texts), 32):
        batch = encoder.encode(texts[start : start + 32])
        pooled, mask = k_pool(batch.hidden, batch.mask, k)
        slots += [l2_normalize(p[m]) for p, m in zip(pooled, mask)]
    return slots, [answers[t] for t in texts]


def noisy_means(slots, smap, mech, gen, repeat: bool = False) -> torch.Tensor:
    """Each prompt's mean noisy renormalised slot after the map (None: slots as encoded); with ``repeat`` every slot
    of a prompt is first replaced by the prompt's unit mean slot."""
    out = []
    for s in slots:
        x = s if smap is None else center_slots(s, smap)
        if repeat:
            x = repeat_mean_slots(x[None], torch.ones(1, x.shape[0], dtype=torch.bool))[0]
        out.append(l2_normalize(mech.sample(x.double(), generator=gen)).float().mean(dim=0))
    return torch.stack(out)


def reader_accuracy(
    train, ytr, test, yte, smap, mech, n_classes: int, passes: int, seed: int, repeat: bool = False
) -> float:
    torch.manual_seed(seed)
    reader = torch.nn.Linear(train[0].shape[-1], n_classes)
    opt = torch.optim.Adam(reader.parameters(), lr=1e-2, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(seed + 1)
    for _ in range(passes):
        x = noisy_means(train, smap, mech, gen, repeat) * 10
        for _ in range(5):
            loss = torch.nn.functional.cross_entropy(reader(x), ytr)
            opt.zero_grad()
            loss.backward()
            opt.step()
    accs = []
    for draw in range(3):
        x = noisy_means(test, smap, mech, torch.Generator().manual_seed(seed + 1000 + draw), repeat) * 10
        with torch.no_grad():
            accs.append(float((reader(x).argmax(dim=1) == yte).float().mean()))
    return sum(accs) / len(accs)


def _ranks(text: str) -> tuple[int, ...]:
    """``--ranks``: comma-separated positive integers."""
    try:
        ranks = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ranks takes comma-separated integers, got {text!r}") from None
    if any(m < 1 for m in ranks):
        raise argparse.ArgumentTypeError(f"--ranks must be positive, got {text!r}")
    return ranks


def probe_parser(description: str) -> argparse.ArgumentParser:
    """The options every probe takes: data, encoder, client and the part scored."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--dataset", default="slja", help="ddx or slja")
    ap.add_argument("--encoder", default="runs/stage1/encoder", help="the client encoder's directory")
    ap.add_argument("--max-tokens", type=int, default=192, help="client truncation in encoder tokens")
    ap.add_argument("--epsilon", type=float, default=28.0)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--validation",
        type=float,
        default=0.0,
        help="score on this share of the training rows (ppft_split validation), never on the held-out part",
    )
    return ap


def probe_data(
    args,
) -> tuple[str, list[str], list[torch.Tensor], list[str], torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """The part scored ("heldout" or "validation"); the classes (the training answers, sorted); the training
    prompts' unit slots, answers and class indices; the scored prompts' slots and class indices (-1: an answer never
    seen in training, never right)."""
    split = ppft_split(args.dataset, validation=args.validation)
    scored = "validation" if args.validation else "heldout"
    encoder = ContextualEncoder.from_pretrained(args.encoder, max_length=args.max_tokens)
    train, train_answers = prompt_slots(encoder, split["train"], args.k)
    test, test_answers = prompt_slots(encoder, split[scored], args.k)
    classes = sorted(set(train_answers))
    ytr = torch.tensor([classes.index(a) for a in train_answers])
    yte = torch.tensor([classes.index(a) if a in classes else -1 for a in test_answers])
    return scored, classes, train, train_answers, ytr, test, yte


def main() -> None:
    ap = probe_parser(__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=60, help="passes of fresh noise over the training prompts")
    ap.add_argument("--fit-passes", type=int, default=12, help="noisy passes the class subspace is fitted from")
    ap.add_argument(
        "--ranks",
        type=_ranks,
        default=(),
        help="comma-separated m: add the noisy-pass class subspace cut to its strongest m directions",
    )
    ap.add_argument(
        "--repeat-mean",
        action="store_true",
        help="also read each map with every slot of a prompt replaced by its unit mean slot (repeat_mean)",
    )
    args = ap.parse_args()

    scored, classes, train, train_answers, ytr, test, yte = probe_data(args)
    mech = L2Laplace(args.epsilon)

    center = torch.stack([s.double().mean(dim=0) for s in train]).mean(dim=0).float()
    centred = [center_slots(s, center) for s in train]
    flat = torch.cat(centred)
    _, vecs = torch.linalg.eigh(flat.T @ flat / flat.shape[0])
    pcs = vecs.flip(1).T  # principal directions, strongest first
    gen = torch.Generator().manual_seed(args.seed + 5)
    noisy = torch.cat([noisy_means(centred, None, mech, gen) for _ in range(args.fit_passes)])
    clean = torch.stack([s.mean(dim=0) for s in centred])
    subspace = class_subspace(noisy, train_answers * args.fit_passes)
    if whole := [m for m in args.ranks if m >= subspace.shape[0]]:
        print(
            f"--ranks {whole}: not below the subspace's rank {subspace.shape[0]}; "
            "the whole-subspace row stands for them"
        )
    subspace_name = f"centred, class subspace from {args.fit_passes} noisy passes"
    maps = {
        "as encoded (PPFT)": None,
        "centred": center,
        subspace_name: torch.cat([center[None], subspace]),
        **{
            f"centred, its strongest {m} directions": torch.cat([center[None], subspace[:m]])
            for m in args.ranks
            if m < subspace.shape[0]
        },
        "centred, class subspace from clean slots": torch.cat([center[None], class_subspace(clean, train_answers)]),
        **{f"centred, top {m} principal directions": torch.cat([center[None], pcs[:m]]) for m in (32, 64, 128)},
    }
    print(
        f"{args.dataset}: {len(train)} training / {len(test)} {scored} prompts, {len(classes)} training answers, "
        f"eps {args.epsilon:g}, k {args.k}; centre norm {float(center.norm()):.3f}"
    )
    for name, smap in maps.items():
        if smap is not None and smap.dim() == 2:
            share = float(((flat @ smap[1:].T) ** 2).sum(dim=1).mean())
            name += f" [m {smap.shape[0] - 1}, {share:.0%} of a centred slot's energy]"
        for repeat in (False, True) if args.repeat_mean else (False,):
            acc = reader_accuracy(train, ytr, test, yte, smap, mech, len(classes), args.passes, args.seed, repeat)
            label = name + (", each prompt's mean slot repeated" if repeat else "")
            print(f"  {label}: {scored} answer accuracy {acc:.3f}", flush=True)
    if (
        args.repeat_mean
    ):  # how much a prompt's own slots cancel in their mean: the norm of the mean of its mapped unit slots
        norms = torch.stack([center_slots(s, maps[subspace_name]).double().mean(dim=0).norm() for s in train])
        print(
            f"  norm of a training prompt's mean slot on the class subspace: mean {float(norms.mean()):.3f} "
            f"(the repeated mean slot: 1); slots per prompt: mean {sum(len(s) for s in train) / len(train):.1f}"
        )


if __name__ == "__main__":
    main()
