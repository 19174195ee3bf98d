"""T2T / PCT2T releases (RAPT's text-to-text privatization) as cell params, shared by the kinds that make them:
``substitution_inversion`` and ``attribute_inference`` with ``release: t2t`` / ``pct2t``.

The mechanism lives in ``params`` (there is no `mechanism` section): ``eta`` (the L2-Laplace parameter of the word
embeddings; grid it), ``pos`` (null: T2T; ``default`` or a list of universal tags: PCT2T), ``table`` and ``tagger``.
"""

from __future__ import annotations

import math
from typing import Any

from ...results.cell import CellError
from ..registry import RunContext

__all__ = ["T2T_PARAMS", "positive", "check_t2t_params", "t2t_mechanism", "t2t_guarantee"]

T2T_PARAMS = {
    "eta": "the L2-Laplace parameter of the word embeddings (grid it)",
    "pos": "null: T2T; a list of categories (e.g. [NOUN, VERB, PRON, ADP]) or 'default': PCT2T",
    "table": "'default' (all-MiniLM-L6-v2's input embeddings), a Hugging Face name/path, or 'glove:PATH'",
    "tagger": "PCT2T tagger: textblob (default) or nltk",
}


def positive(x: Any) -> bool:
    """A finite number > 0 (not a bool)."""
    return not isinstance(x, bool) and isinstance(x, (int, float)) and x > 0 and math.isfinite(x)


def check_t2t_params(p: dict) -> None:
    """:class:`CellError` naming the field and the value when ``eta``, ``pos``, ``table`` or ``tagger`` is malformed."""
    from ...substitution.cli_support import parse_pos
    from ...substitution.pos import TAGGERS, UNIVERSAL_TAGS

    eta = p.get("eta")
    if not positive(eta):
        raise CellError(f"eta must be a finite number > 0, got {eta!r}", field="params.eta")
    pos = p.get("pos")
    if (
        pos is not None
        and pos != "default"
        and not (isinstance(pos, list) and pos and all(isinstance(c, str) for c in pos))
    ):
        raise CellError(f"pos must be null, 'default' or a list of categories, got {pos!r}", field="params.pos")
    if isinstance(pos, list):
        unknown = [c for c in parse_pos(",".join(pos)) or () if c not in UNIVERSAL_TAGS]
        if unknown:
            raise CellError(f"pos has unknown categories {unknown}; known: {list(UNIVERSAL_TAGS)}", field="params.pos")
    table = p.get("table", "default")
    if not isinstance(table, str) or not table:
        raise CellError(
            f"table must be 'default', a model name/path or 'glove:PATH', got {table!r}", field="params.table"
        )
    tagger = p.get("tagger", "textblob")
    if tagger not in TAGGERS:
        raise CellError(f"tagger must be one of {list(TAGGERS)}, got {tagger!r}", field="params.tagger")


def t2t_mechanism(p: dict, context: RunContext):
    """The :class:`~textfree.substitution.t2t.TextToText` of ``p`` at ``p['eta']``; the table's index (and PCT2T's
    tags) are built once per run and shared across etas."""
    from ...substitution.cli_support import build_t2t
    from ...substitution.t2t import DEFAULT_POS_CATEGORIES

    pos = p.get("pos")
    pos_arg = None if pos is None else ",".join(DEFAULT_POS_CATEGORIES if pos == "default" else pos)
    key = ("t2t", p.get("table", "default"), pos_arg, p.get("tagger", "textblob"))
    base = context.cached(
        key,
        lambda: build_t2t(table=p.get("table", "default"), eta=1.0, pos=pos_arg, tagger=p.get("tagger", "textblob")),
    )
    return base.with_eta(float(p["eta"]))


def t2t_guarantee(mech: Any, released: Any) -> dict[str, float]:
    """What one release of a batch of texts guarantees and changed: ``word_epsilon`` (eta x D_max: one word's worst
    case), ``prompt_epsilon`` / ``prompt_epsilon_max`` (mean / largest over texts of substituted words x
    word_epsilon), ``replacement_rate`` (substituted words that changed) and ``kept_rate`` (words outside the table,
    released verbatim and not covered by the guarantee)."""
    word_eps = mech.privacy_loss_per_word().epsilon
    per_text = released.substituted_per_text
    return {
        "replacement_rate": released.replacement_rate,
        "kept_rate": released.n_kept / released.n_words,
        "word_epsilon": word_eps,
        "prompt_epsilon": word_eps * sum(per_text) / len(per_text),
        "prompt_epsilon_max": word_eps * max(per_text),
    }
