"""T2T / PCT2T releases (RAPT's text-to-text privatization) as cell params, shared by the kinds that make them:
``substitution_inversion`` and ``attribute_inference`` with ``release: t2t`` / ``pct2t``.

The mechanism lives in ``params`` (there is no `mechanism` section): ``eta`` (the L2-Laplace parameter of the word
embeddings; grid it), ``pos`` (null: T2T; ``default`` or a list of universal tags: PCT2T), ``table``, ``tagger`` and
``oov_word``: a word of the table that every word the table lacks becomes before the mechanism
(:func:`textfree.lm.dchi.fold_out_of_table`, the client of PPFT's word-level d_chi baseline), so no word is sent as it
is; null (the default): such words are released verbatim, outside the guarantee (T2T's ``keep``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...results.cell import CellError
from ..registry import RunContext

__all__ = ["T2T_PARAMS", "FoldedT2T", "positive", "check_t2t_params", "t2t_mechanism", "t2t_guarantee"]

T2T_PARAMS = {
    "eta": "the L2-Laplace parameter of the word embeddings (grid it)",
    "pos": "null: T2T; a list of categories (e.g. [NOUN, VERB, PRON, ADP]) or 'default': PCT2T",
    "table": "'default' (all-MiniLM-L6-v2's input embeddings), a Hugging Face name/path, or 'glove:PATH'",
    "tagger": "PCT2T tagger: textblob (default) or nltk",
    "oov_word": "a table word that every out-of-table word becomes before the mechanism (PPFT's d_chi client: every "
    "word privatized); null (default): out-of-table words released verbatim",
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
    pos = _pos_list(p.get("pos"))
    if (
        pos is not None
        and pos != "default"
        and not (isinstance(pos, list) and pos and all(isinstance(c, str) for c in pos))
    ):
        raise CellError(
            f"pos must be null, 'default', a list of categories or a comma string of them, got {p.get('pos')!r}",
            field="params.pos",
        )
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
    word = p.get("oov_word")
    if word is not None and (not isinstance(word, str) or word.split() != [word]):
        raise CellError(
            f"oov_word must be null or one word of the table (no spaces), got {word!r}", field="params.oov_word"
        )


@dataclass(frozen=True)
class FoldedT2T:
    """``base`` with every out-of-table word mapped to ``word`` first (:func:`textfree.lm.dchi.fold_out_of_table`):
    the d_chi baseline's client. Every word goes through the mechanism; each text keeps its number of words, so the
    release's ``output_words`` stay aligned with the words of the unfolded text. Accounting as ``base``'s."""

    base: Any  # a TextToText
    word: str

    def __post_init__(self) -> None:
        from ...lm.dchi import fold_out_of_table

        fold_out_of_table([], self.base.table, self.word)  # ValueError unless one word of the table

    def __getattr__(self, name: str) -> Any:  # table, eta, privacy_loss_per_word, ...
        if name in ("base", "word") or name.startswith("__"):  # not yet set (copy, pickle)
            raise AttributeError(name)
        return getattr(self.base, name)

    def with_eta(self, eta: float) -> "FoldedT2T":
        return FoldedT2T(self.base.with_eta(eta), self.word)

    def privatize_detailed(self, texts: list[str], *, generator: Any = None):
        from ...lm.dchi import fold_out_of_table

        return self.base.privatize_detailed(fold_out_of_table(texts, self.base.table, self.word), generator=generator)

    def privatize(self, texts: list[str], *, generator: Any = None) -> list[str]:
        return self.privatize_detailed(texts, generator=generator).texts


def _pos_list(pos: Any) -> Any:
    """``pos`` as given, a comma string of categories (a grid value: ``noun``, ``noun,verb``) read as their list."""
    if isinstance(pos, str) and pos != "default" and pos.strip():
        return [c.strip() for c in pos.split(",") if c.strip()]
    return pos


def t2t_mechanism(p: dict, context: RunContext):
    """The :class:`~textfree.substitution.t2t.TextToText` of ``p`` at ``p['eta']`` (a :class:`FoldedT2T` with
    ``oov_word``); the table's index (and PCT2T's tags) are built once per run and shared across etas."""
    from ...substitution.cli_support import build_t2t
    from ...substitution.t2t import DEFAULT_POS_CATEGORIES

    pos = _pos_list(p.get("pos"))
    pos_arg = None if pos is None else ",".join(DEFAULT_POS_CATEGORIES if pos == "default" else pos)
    key = ("t2t", p.get("table", "default"), pos_arg, p.get("tagger", "textblob"))
    base = context.cached(
        key,
        lambda: build_t2t(table=p.get("table", "default"), eta=1.0, pos=pos_arg, tagger=p.get("tagger", "textblob")),
    )
    mech = base.with_eta(float(p["eta"]))
    word = p.get("oov_word")
    if word is None:
        return mech
    try:
        return FoldedT2T(mech, word)
    except ValueError as exc:
        raise CellError(str(exc), field="params.oov_word") from None


def t2t_guarantee(mech: Any, released: Any) -> dict[str, float]:
    """What one release of a batch of texts guarantees and changed: ``word_epsilon`` (eta x D_max: one word's worst
    case), ``prompt_epsilon`` / ``prompt_epsilon_max`` (mean / largest over texts of substituted words x
    word_epsilon), ``replacement_rate`` (substituted words that changed) and ``kept_rate`` (words outside the table,
    released verbatim and not covered by the guarantee; 0 with ``oov_word``)."""
    word_eps = mech.privacy_loss_per_word().epsilon
    per_text = released.substituted_per_text
    return {
        "replacement_rate": released.replacement_rate,
        "kept_rate": released.n_kept / released.n_words,
        "word_epsilon": word_eps,
        "prompt_epsilon": word_eps * sum(per_text) / len(per_text),
        "prompt_epsilon_max": word_eps * max(per_text),
    }
