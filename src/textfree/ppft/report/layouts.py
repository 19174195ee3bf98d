"""The beyond-the-paper layouts of the PPFT report: their names, their sections, and which runs belong to which."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .entries import _PPFT_LAYOUT, Entry, _get, _layout_default

_LAYOUT_HEADER = {
    "summary": "server layout",
    "ema": "server training",
    "optim": "server training",
    "fixed": "client",
    "count": "server layout",
    "answer": "server layout",
    "center": "client",
    "augment": "server training",
    "variants": "client training",
    "center+augment": "client + server training",
    "center+answer": "client + server layout",
    "center+subspace": "client",
    "center+subspace+answer": "client + server layout",
    "center+subspace+repeat+answer": "client + server layout",
    "center+repeat": "client",
    "center+repeat+answer": "client + server layout",
    "center+repeat+summary": "client + server layout",
    "center+repeat+summary+summary_only": "client + server layout",
    "center+repeat+summary+summary_only+optim": "client + server layout + training",
}

#: Layout keys that change only how stage 2 optimises (the peak lr and weight decay, a weight average), not what the
#: client sends, how the server reads it or what it trains on: rows of PPFT itself with other hyperparameters.
_OPTIMISATION_KEYS = frozenset({"optim", "ema"})


def _layout_values(entries: Sequence[Entry], key: str) -> list[Any]:
    """The values of layout ``key`` ("center", or combined: "center+answer") among the ``entries`` that keep PPFT's
    value of every other layout key, each part differing from PPFT's, sorted: a run that changes two keys belongs to
    their combined section, not to either key's own."""
    others = {k: v for k, v in _PPFT_LAYOUT.items() if k not in key.split("+")}
    found = {_get(e, key) for e in entries if all(_get(e, k) == v for k, v in others.items())}
    return sorted(v for v in found if _differs_from_ppft(key, v))


def _differs_from_ppft(key: str, value: Any) -> bool:
    """Whether ``value`` of layout ``key`` is not PPFT's; of a combined key, whether every part differs."""
    default = _layout_default(key)
    return all(x != d for x, d in zip(value, default)) if "+" in key else value != default


def _count_layout(value: tuple[int, float]) -> str:
    n, dropout = value
    if not n:
        return "PPFT (slots only)"
    return f"count vector (1..{n})" + (f", training dropout {dropout:g}" if dropout else "") + " + slots"


def _augment_layout(value: tuple[float, float, int]) -> str:
    insert, drop, epochs = value
    parts = ([f"drops slots (p {drop:g})"] if drop else []) + (
        [f"inserts up to {insert:g} n random slots"] if insert else []
    )
    if not parts:
        return "PPFT (training rows as sent)"
    return "server " + ", then ".join(parts) + (f" in the first {epochs} training epochs" if epochs else " in training")


def _variants_layout(value: tuple[float, bool, float] | None) -> str:
    if value is None:
        return "PPFT (training prompts as written)"
    prob, shuffle, drop = value
    how = " and ".join(
        (["list items reordered"] if shuffle else []) + ([f"each item left out with p {drop:g}"] if drop else [])
    )
    return f"client sends {prob:.0%} of training prompts rewritten ({how})"


def _optim_layout(value: tuple[float, float]) -> str:
    lr, wd = value
    parts = ([f"stage-2 lr {lr:g}"] if lr != _PPFT_LAYOUT["optim"][0] else []) + (
        [f"weight decay {wd:g}"] if wd else []
    )
    return "PPFT, " + ", ".join(parts) if parts else "PPFT (stage-2 lr 0.001, no weight decay)"


def _answer_layout(v: tuple[bool, bool, bool, int]) -> str:
    """Name of an answer-head layout (linear, standardised, weighed over the options shown, MLP width)."""
    linear, standardised, options, hidden = v
    words = (["standardised"] if standardised else []) + (["linear"] if linear else [])
    if hidden not in (0, 256):
        words.append(f"{hidden}-wide")
    head = f"{' '.join(words)} head" if words else ""
    if options:
        head += (", " if head else "") + "over the options shown"
    return "answer vector" + (f" ({head})" if head else "")


def _subspace_layout(v: tuple[Any, Any]) -> str:
    """Name of a (centre mu, subspace passes) client."""
    return f"slots centred (centre {v[0]:g}-GDP) on the class subspace ({v[1]} passes)"


#: The beyond-the-paper layout sections: (layout key, name of a layout value, heading, introduction lines).
_LAYOUT_SECTIONS: list[tuple[str, Callable[[Any], str], str, list[str]]] = [
    (
        "summary",
        lambda n: "PPFT (slots only)" if n == 0 else f"{n} summary vector{'s' if n > 1 else ''} + slots",
        "server-side summary vectors",
        [
            "The server puts the unit-normalised mean of a payload's slots (cut into N contiguous groups) before the",
            "slots, through the same P_psi: averaging n noisy unit slots shrinks the noise's share by about sqrt(n)",
            "where the clean slots agree. Post-processing of the payload: the client and its guarantee are unchanged.",
            "The tables above use PPFT's layout (slots only).",
        ],
    ),
    (
        "count",
        _count_layout,
        "a count vector before the slots",
        [
            "The server puts a learned vector for the payload's slot count before the slots (`count_vectors`): the",
            "count is in the payload anyway, and rotary positions leave it implicit to the decoder. With training",
            "dropout, a row's count vector is zeroed with that probability in training (never at inference).",
            "Post-processing of the payload: the client and its guarantee are unchanged. The tables above use",
            "PPFT's layout.",
        ],
    ),
    (
        "fixed",
        lambda fixed: "pads to a fixed slot count" if fixed else "PPFT (count released)",
        "the client hides the slot count",
        [
            "PPFT releases ceil(tokens / k) slots, and the count is not noised: prompts of different lengths are told",
            "apart with certainty. With `fixed_slots` the client pads every payload to ceil(max_private_tokens / k)",
            "slots, public filler slots after the prompt's own, noised like them, so any two prompts differ in at most",
            'that many slots. "Random slots": the same model given random unit slots at each payload\'s count (with',
            "padding: at the fixed count), what the count alone gives it. The tables above release the count.",
        ],
    ),
    (
        "center",
        lambda mu: "PPFT (slots as encoded)" if mu is None else f"slots centred (centre {mu:g}-GDP)",
        "the client centres its slots",
        [
            "MiniLM's unit slots share a common direction (on Pri-SLJA the mean slot has norm 0.63), so typical slots "
            "lie",
            "closer together than unit vectors can. The client subtracts a public centre from every unit slot and",
            "renormalises before the noise (`center_mu`; textfree.mechanisms.centering): the centre is the mean slot "
            "of the",
            "training prompts, released once with Gaussian noise that makes it mu-GDP per prompt, and ships with the",
            "model. Every slot stays a unit vector, so the per-slot guarantee (2 eps) and the slot's mu are PPFT's; "
            "what",
            "changes is how far apart real prompts' slots lie, for the server and for an attacker alike (the attack",
            "report measures the second). The tables above use PPFT's client.",
        ],
    ),
    (
        "answer",
        lambda on: _answer_layout(on) + " + slots" if on else "PPFT (slots only)",
        "an answer head before the slots",
        [
            "Stage 2 first trains an answer head on fresh payloads of the training rows (the attribute attacker's",
            "classifier: the mean of the noisy slots and the one-hot slot count, a 2-layer MLP; classes: the distinct",
            "training targets), then puts its class vectors, weighted by its probabilities, before the slots and",
            'trains P_psi + LoRA as PPFT does (`answer_head`). "Answer head alone": its most probable class on the',
            "open-answer payloads, or the option it ranks highest on the 4-option ones, no decoder. Post-processing of",
            'the payload: the client and its guarantee are unchanged. "Standardised head": the head standardises the '
            "mean",
            'slot before its MLP (`answer_head_standardize`); "linear head": no hidden layer (`answer_head_hidden: '
            "0`);",
            '"over the options shown": on a 4-option prompt the class vectors are weighed by the head\'s probabilities',
            "renormalised over the classes its public options block names (`answer_head_options`), in training and at",
            "inference.",
            "The tables above use PPFT's layout.",
        ],
    ),
    (
        "augment",
        _augment_layout,
        "the server blurs the slot count in training",
        [
            'At eps 28 PPFT\'s decoder answers open questions mostly from the slot count (see "random slots"). In',
            "stage 2 the server drops slots of its training rows and/or inserts random unit slots at random positions,",
            "fresh every epoch (`slot_drop`, `slot_insert`; textfree.ppft.slot_augment), so the count no longer names "
            "the",
            "answer alone (with `slot_augment_epochs`: in the first epochs only). Training only, on payloads the "
            "client",
            "already privatized: the client, its payloads, their guarantee and the answering path are PPFT's. The "
            "tables",
            "above use PPFT's training rows as sent.",
        ],
    ),
    (
        "variants",
        _variants_layout,
        "the client rewrites its training prompts",
        [
            "In stage 2 the client sends, for each training example and epoch with probability p, a fresh rewrite of "
            "its",
            "private prompt instead of the prompt (`prompt_variants`; textfree.ppft.prompt_variants): the items of "
            "each of",
            "its lists in another order and, with `prompt_variant_drop`, some of them left out, so the slot count and "
            "the",
            "slots' content stay consistent. From the training rows themselves, before encoding; the server still gets",
            "payloads only, the layout and the answering path are PPFT's, and each epoch still releases one payload "
            "per",
            "training example. Training only: questions are answered as written. The tables above use the prompts as",
            "written.",
        ],
    ),
    (
        "ema",
        lambda d: "PPFT (last step's weights)" if d is None else f"PPFT, weights averaged (decay {d:g})",
        "the server averages its weights in training",
        [
            "The client, the payloads, the layout and the answering path are PPFT's; only stage 2's training recipe",
            "changes: the server keeps an exponential moving average of the projection and LoRA weights over its steps",
            "(`ema_decay`; textfree.training.average) and saves it instead of the last step's weights, which follow "
            "the last",
            "batches' noise. The tables above use the last step's weights.",
        ],
    ),
    (
        "optim",
        _optim_layout,
        "the server's stage-2 optimiser settings",
        [
            "The client, the payloads, the layout and the answering path are PPFT's; only stage 2's optimiser changes: "
            "its",
            "peak learning rate for the projection and LoRA (`lr`, default 1e-3) or AdamW's weight decay "
            "(`weight_decay`,",
            "default 0). The tables above use the defaults.",
        ],
    ),
    (
        "center+augment",
        lambda v: (
            "PPFT (slots as encoded, training rows as sent)"
            if v == (None, (0.0, 0.0, 0))
            else f"slots centred (centre {v[0]:g}-GDP) + " + _augment_layout(v[1])
        ),
        "centred slots and a count-blurring curriculum",
        [
            "Both at once: the client centres its slots (above), and the server blurs the slot count of its training "
            "rows",
            "(above). The tables above use PPFT's client and training rows as sent.",
        ],
    ),
    (
        "center+answer",
        lambda v: (
            "PPFT (slots as encoded, slots only)"
            if v == (None, False)
            else f"slots centred (centre {v[0]:g}-GDP) + " + _answer_layout(v[1])
        ),
        "centred slots and an answer head",
        [
            "Both of the sections above at once: the client centres its slots, and the server's answer head, trained "
            "on",
            "the centred payloads, puts its answer vector before them. The tables above use PPFT's client and layout.",
        ],
    ),
    (
        "center+subspace",
        lambda v: "PPFT (slots as encoded)" if v == (None, None) else _subspace_layout(v),
        "centred slots projected onto the class subspace",
        [
            "After centring, the client projects every slot onto a public class subspace and renormalises it before "
            "the",
            "noise (`subspace_epochs`; textfree.mechanisms.subspace): the span of the training targets' mean payload "
            "slots,",
            "which the server fits from that many passes of fresh centred payloads of the training prompts and which "
            "ships",
            "with the centre. The noise is isotropic, so the share of a slot's unit norm outside the answers' "
            "directions",
            "is lost to a reader of the answer; projected, the slot spends all of it there. Every slot stays a unit "
            "vector:",
            "the per-slot guarantee (2 eps) and the slot's mu are PPFT's; the fit reads that many more releases of "
            "each",
            "training prompt. The server is PPFT's (slots only). The tables above use PPFT's client.",
        ],
    ),
    (
        "center+subspace+answer",
        lambda v: (
            "PPFT (slots as encoded, slots only)"
            if v == (None, None, False)
            else _subspace_layout(v[:2]) + " + " + _answer_layout(v[2])
        ),
        "centred slots on the class subspace and an answer head",
        [
            "The client of the section above, and the server's answer head (trained on the projected payloads) before "
            "the",
            "slots. The tables above use PPFT's client and layout.",
        ],
    ),
    (
        "center+subspace+repeat+answer",
        lambda v: (
            "PPFT (slots as encoded, slots only)"
            if v == (None, None, False, False)
            else _subspace_layout(v[:2]) + ", each prompt's mean slot repeated + " + _answer_layout(v[3])
        ),
        "centred slots on the class subspace, the prompt's mean slot repeated, and an answer head",
        [
            "The client and server of the section above, and the client sends each prompt's unit mean slot (after the",
            "subspace) in place of every one of its slots, before the noise (`repeat_mean`; "
            "textfree.mechanisms.slots):",
            "s noisy copies of one unit vector, where a prompt's different slots partly cancel in their mean. Every "
            "slot",
            "stays a unit vector: the per-slot guarantee (2 eps) and a prompt's (s slots) are PPFT's; the slots' order "
            "and",
            "wording are gone, so this client is for answers from a closed set. The tables above use PPFT's client and "
            "layout.",
        ],
    ),
    (
        "center+repeat",
        lambda v: (
            "PPFT (slots as encoded)"
            if v == (None, False)
            else f"slots centred (centre {v[0]:g}-GDP), each prompt's mean slot repeated"
        ),
        "centred slots, the prompt's mean slot repeated",
        [
            "The client centres its slots on the public centre and sends each prompt's unit mean slot in place of "
            "every one",
            "of its slots, before the noise (`center_mu`, `repeat_mean`): s noisy copies of one unit vector, where a",
            "prompt's different slots partly cancel in their mean. No map on the client's side is fitted to training",
            "labels. The server is PPFT's (slots only). Every slot stays a unit vector: the per-slot guarantee (2 eps) "
            "and",
            "a prompt's (s slots) are PPFT's; the slots' order and wording are gone, so this client is for answers "
            "from a",
            "closed set. The tables above use PPFT's client.",
        ],
    ),
    (
        "center+repeat+answer",
        lambda v: (
            "PPFT (slots as encoded, slots only)"
            if v == (None, False, False)
            else f"slots centred (centre {v[0]:g}-GDP), each prompt's mean slot repeated + " + _answer_layout(v[2])
        ),
        "centred slots, the prompt's mean slot repeated, and an answer head",
        [
            "The client of the section above (centred, each prompt's mean slot repeated, no class subspace) and the",
            "server's answer head, trained on its payloads, before the slots. Every slot stays a unit vector: the "
            "per-slot guarantee",
            "(2 eps) and a prompt's (s slots) are PPFT's. The tables above use PPFT's client and layout.",
        ],
    ),
    (
        "center+repeat+summary",
        lambda v: (
            "PPFT (slots as encoded, slots only)"
            if v == (None, False, 0)
            else f"slots centred (centre {v[0]:g}-GDP), each prompt's mean slot repeated + {v[2]} summary "
            f"vector{'s' if v[2] > 1 else ''}"
        ),
        "centred slots, the prompt's mean slot repeated, and a summary vector",
        [
            "The client of the section \"centred slots, the prompt's mean slot repeated\" and PPFT's server with the",
            "unit-normalised mean of the payload's slots before them (`summary_slots`), through the same P_psi: with "
            "this",
            "client a prompt's slots are noisy copies of one vector, so their mean is the whole message with the noise",
            "shrunk by about sqrt(s). No answer head: the decoder writes the answer. Post-processing on the server: "
            "every",
            "slot stays a unit vector, the per-slot guarantee (2 eps) and a prompt's (s slots) are PPFT's. The tables "
            "above",
            "use PPFT's client and layout.",
        ],
    ),
    (
        "center+repeat+summary+summary_only",
        lambda v: (
            "PPFT (slots as encoded, slots only)"
            if v == (None, False, 0, False)
            else f"slots centred (centre {v[0]:g}-GDP), each prompt's mean slot repeated; {v[2]} summary "
            f"vector{'s' if v[2] > 1 else ''} in place of the slots"
        ),
        "centred slots, the prompt's mean slot repeated, and a summary vector in place of the slots",
        [
            "The client and server of the section above, but the server hands the decoder the summary vector alone: "
            "the",
            "payload's slots are not laid out (`summary_only`). With this client they are noisy copies of one vector, "
            "so",
            "their mean carries what they carry, and the decoder is not handed s vectors of mostly noise beside it. No",
            "answer head: the decoder writes the answer. Post-processing on the server: every slot stays a unit "
            "vector,",
            "the per-slot guarantee (2 eps) and a prompt's (s slots) are PPFT's. The tables above use PPFT's client "
            "and",
            "layout.",
        ],
    ),
    (
        "center+repeat+summary+summary_only+optim",
        lambda v: (
            "PPFT (slots as encoded, slots only)"
            if v[:4] == (None, False, 0, False)
            else f"slots centred (centre {v[0]:g}-GDP), each prompt's mean slot repeated; {v[2]} summary "
            f"vector{'s' if v[2] > 1 else ''} in place of the slots; " + _optim_layout(v[4]).removeprefix("PPFT, ")
        ),
        "centred slots, the prompt's mean slot repeated, a summary vector in place of the slots, other stage-2 "
        "settings",
        [
            "The client and server of the section above, trained with other stage-2 optimisation settings (each row's",
            "name says which). The tables above use PPFT's client, layout and settings.",
        ],
    ),
]


def settings_name(layout: dict[str, Any]) -> str:
    """ "stage-2 lr 0.0005" for one optimisation setting of PPFT's own layout (``{"optim": (5e-4, 0.0)}``)."""
    ((key, value),) = layout.items()
    return next(n for k, n, _, _ in _LAYOUT_SECTIONS if k == key)(value).removeprefix("PPFT, ")
