"""RAPT for generation (the issue's NLG part): a local decoder fine-tuned on PCT2T-privatized Pri-* prompts, answering
privatized held-out prompts; the first side-by-side of PPFT and RAPT on one decoder, one dataset, one budget.

The client privatizes the private part of each record's prompt once (T2T or PCT2T at ``eta`` over the encoder's word
table; ``pos`` ``all`` by default: the paper, section IV-B, privatizes every category for clinical and legal text);
the public part (instruction, options) is sent as it is, as in PPFT. The server fine-tunes the decoder on the
privatized training prompts (4-option and open prompts built from the same privatized text: one release per record)
with :func:`textfree.lm.text_tuning.tune_text_decoder`, and answers the held-out records privatized with fresh noise.
The split is PPFT's (:func:`textfree.data.ppft_split`), so the held-out part is the one PPFT's figures use.

With ``plain_length`` m > 0 the client prepends RAPT's plain tokens (section III-B2): one public sequence of m words
drawn uniformly from the mechanism's table words of its categories (:class:`~textfree.substitution.plain.PlainTokens`,
seeded by ``seed``, ``rec_vocab_size`` as in :class:`~textfree.rapt.config.RaptTrainConfig`), privatized in the same
mechanism call as the private parts, as their own text per record (as :func:`~textfree.substitution.examples.
privatize_examples` does: tagged in their own context, each record its own noise; public, so not in the record's
accounting), and prepended to the private part of every prompt, training and held-out alike (the paper prepends them
at inference too). With ``reconstruction`` the server also trains RAPT's reconstruction head
(:class:`~textfree.heads.reconstruction.ReconstructionHead`, hidden ``rec_hidden``) on the decoder's last hidden states
at the first sub-token of each privatized plain word (the first token whose characters overlap the word's: with a
byte-level BPE, the one carrying its leading space), the target being the index of the ORIGINAL plain word in the
reconstruction vocabulary; the loss is the answer's LM loss + ``rec_weight`` x the reconstruction loss summed over the
m words (eq. 6, as the classifier's). A prompt too long for ``max_length`` keeps its plain tokens whole and loses the
first tokens of its private part instead (:func:`~textfree.lm.text_tuning.encode_pairs`). The head is dropped after
training: the run saves the adapter alone, as without it, and the public ``plain_tokens.json``. Without plain tokens
this is the paper's "PCT2T" row on a decoder; with them and the head, "+Reconstruction"; with them and no head, the
ablation "w/o Reconstruction" (Table VIII).

The same run is PPFT's word-level d_chi baseline (Table 1; :mod:`textfree.lm.dchi`) with ``pos`` null (T2T),
``table`` a word table (``glove:PATH``) and ``oov_word`` set (every word through the mechanism). Each run also scores
the word-count controls of :mod:`textfree.lm.text_controls` on the very texts the client released.

With ``privatizer`` ``paraphrase`` the same run is PPFT's Paraphrase baseline (Table 1; :mod:`textfree.lm.paraphrase`):
the client replaces the private part by a paraphrase sampled at ``temperature`` (tau = 2n/B) from a paraphraser the
decoder was fine-tuned into on QQP's training duplicates (trained once under ``paraphraser_out``, then reused); the
public part is sent as it is. ``eta``, ``pos``, ``table`` and ``oov_word`` are then unused (null).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..heads.reconstruction import ReconstructionHead
from ..lm.text_controls import length_controls
from ..lm.text_qa import QA_TASKS, private_parts, qa_pairs, score_answers
from ..lm.text_tuning import TextPair, TextTuningConfig, answer_prompts, tune_text_decoder
from ..rng import seeded_generator
from ..substitution.plain import PlainTokens
from ..training.config import _check_int, _check_optional_int
from ..training.runs import write_summary

__all__ = ["RaptQAConfig", "train_rapt_qa"]


@dataclass(kw_only=True)
class RaptQAConfig(TextTuningConfig):
    """A decoder fine-tuned on privatized Pri-* prompts and scored on privatized held-out ones."""

    dataset: str = field(default="pri-ddx", metadata={"help": "Pri-* dataset (ppft_split: PPFT's train / held-out)."})
    encoder: str = field(default="default", metadata={"help": "Whose word table T2T / PCT2T use ('default': MiniLM)."})
    table: str | None = field(
        default=None,
        metadata={"help": "The word table T2T / PCT2T use instead of the encoder's: 'glove:PATH' or an HF name/path."},
    )
    oov_word: str | None = field(
        default=None,
        metadata={
            "help": "Replace words outside the table by this table word before the mechanism, so every word is "
            "privatized (the word-level d_chi baseline); null: they are sent verbatim (T2T's default)."
        },
    )
    eta: float | None = field(default=None, metadata={"help": "T2T / PCT2T eta per word (null: no privatization)."})
    pos: str | None = field(
        default="all", metadata={"help": "PCT2T categories ('all' for clinical text, section IV-B); null: T2T."}
    )
    eval_limit: int | None = field(default=300, metadata={"help": "Score the first N held-out records (null: all)."})
    prompts: str | None = field(
        default=None, metadata={"help": "Also score these Pri-* layout JSON Lines records (e.g. hand-written ones)."}
    )
    max_new_tokens: int = field(default=16, metadata={"help": "Answer length."})
    noise_seed: int | None = field(default=None, metadata={"help": "Seeds the privatization noise (null: seed)."})
    privatizer: str = field(
        default="t2t",
        metadata={"help": "'t2t' (T2T / PCT2T at eta) or 'paraphrase' (PPFT's Paraphrase baseline at temperature)."},
    )
    temperature: float | None = field(
        default=None, metadata={"help": "The paraphraser's sampling temperature tau = 2n/B (privatizer paraphrase)."}
    )
    paraphraser_pairs: int = field(
        default=2000, metadata={"help": "QQP training-part duplicate pairs (both directions) the paraphraser learns."}
    )
    paraphraser_epochs: int = field(default=1, metadata={"help": "The paraphraser's passes over its pairs."})
    paraphraser_out: str = field(
        default="runs/paraphraser", metadata={"help": "Where the paraphraser is saved (and reused from)."}
    )
    plain_length: int = field(
        default=0, metadata={"help": "m: RAPT's plain tokens prepended to the private part (0: none; the paper: 40)."}
    )
    reconstruction: bool = field(
        default=False, metadata={"help": "Train RAPT's reconstruction head on the plain tokens (plain_length > 0)."}
    )
    rec_hidden: int = field(default=96, metadata={"help": "The reconstruction head's hidden size c (the paper: 96)."})
    rec_vocab_size: int | None = field(
        default=None, metadata={"help": "Reconstruction vocabulary size (null: every eligible table word)."}
    )
    rec_weight: float = field(default=1.0, metadata={"help": "Weight of the reconstruction loss (the paper: 1)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.eta is not None and not (isinstance(self.eta, (int, float)) and self.eta > 0):
            raise ValueError(f"eta must be a positive number or null, got {self.eta!r}")
        if self.eval_limit is not None and self.eval_limit < 1:
            raise ValueError(f"eval_limit must be >= 1 or null, got {self.eval_limit}")
        for name in ("table", "oov_word"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string or null, got {value!r}")
        if self.privatizer not in ("t2t", "paraphrase"):
            raise ValueError(f"privatizer must be 't2t' or 'paraphrase', got {self.privatizer!r}")
        if self.privatizer == "paraphrase":
            if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
                raise ValueError(f"privatizer paraphrase needs a temperature > 0, got {self.temperature!r}")
            if self.eta is not None or self.pos is not None or self.oov_word is not None:
                raise ValueError("privatizer paraphrase takes no eta, pos or oov_word (set them to null)")
        elif self.temperature is not None:
            raise ValueError("temperature is the paraphraser's: set privatizer to 'paraphrase' or temperature to null")
        self._check_plain()

    def _check_plain(self) -> None:
        _check_int("plain_length", self.plain_length, 0)
        _check_int("rec_hidden", self.rec_hidden, 1)
        _check_optional_int("rec_vocab_size", self.rec_vocab_size, 2)
        if not isinstance(self.reconstruction, bool):
            raise ValueError(f"reconstruction must be true or false, got {self.reconstruction!r}")
        weight = self.rec_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
            raise ValueError(f"rec_weight must be a number >= 0, got {self.rec_weight!r}")
        if self.reconstruction and self.plain_length == 0:
            raise ValueError("reconstruction needs plain_length > 0 (the head reconstructs the plain tokens), got 0")
        if self.plain_length and self.privatizer != "t2t":
            raise ValueError(f"plain_length must be 0 with privatizer {self.privatizer!r} (plain tokens go through "
                             f"T2T / PCT2T), got {self.plain_length}")  # fmt: skip
        if self.plain_length >= self.max_length - 4:
            raise ValueError(f"plain_length {self.plain_length} leaves no room in max_length {self.max_length}")


@dataclass(frozen=True)
class _Release:
    """What the client sent for a list of private texts."""

    texts: list[str]  # the released private parts
    words: list[int]  # each text's privatized words (its privacy loss: n x eps)
    kept: float  # the share of the private words sent verbatim, without the mechanism
    plain: list[tuple[str, ...]] | None = None  # each text's privatized plain tokens (None: no plain tokens)


def _client(cfg: RaptQAConfig):
    """(``privatize``, mechanism, plain tokens): the client's privatization of a list of private texts (a fresh
    generator per call site) into a :class:`_Release`, its mechanism (None: paraphrase or clear text) and RAPT's plain
    tokens (None without them)."""
    if cfg.privatizer == "paraphrase":
        return _paraphrase_client(cfg), None, None
    from ..lm.dchi import fold_out_of_table
    from .train import build_mechanism

    mechanism = build_mechanism(cfg.table or cfg.encoder, cfg.eta, cfg.pos)
    plain = _plain_tokens(cfg, mechanism)
    seed = cfg.seed if cfg.noise_seed is None else cfg.noise_seed

    def privatize(texts: list[str], part: int) -> _Release:
        n = len(texts)
        if mechanism is None:  # clear text: the plain tokens are sent as they are too
            return _Release(list(texts), [0] * n, 1.0, None if plain is None else [plain.sequences[0]] * n)
        if cfg.oov_word is not None:
            texts = fold_out_of_table(texts, mechanism.table, cfg.oov_word)
        extra = [] if plain is None else [" ".join(plain.sequences[0])] * n  # one copy per text, its own noise
        generator = seeded_generator(seed * 3 + part, warn=False)
        result = mechanism.privatize_detailed(list(texts) + extra, generator=generator)
        flags = [f for row in result.privatized[:n] for f in row]
        kept = (len(flags) - sum(flags)) / max(len(flags), 1)
        released = _Release(list(result.texts[:n]), list(result.substituted_per_text[:n]), kept)
        if plain is None:
            return released
        return dataclasses.replace(released, plain=[_plain_words(w, plain) for w in result.output_words[n:]])

    return privatize, mechanism, plain


def _plain_tokens(cfg: RaptQAConfig, mechanism: Any) -> PlainTokens | None:
    """RAPT's public plain tokens, drawn as :mod:`textfree.rapt.train` draws them: one sequence of ``plain_length``
    table words of the mechanism's categories (clear text: of ``pos``'s), seeded by ``seed``."""
    from .train import build_mechanism

    if cfg.plain_length == 0:
        return None
    mechanism = mechanism or build_mechanism(cfg.table or cfg.encoder, 1.0, cfg.pos)
    tags = mechanism.vocabulary_tags() if mechanism.is_pct2t else None
    return PlainTokens.sample(mechanism.table.words, tags, categories=mechanism.pos_categories,
                              length=cfg.plain_length, n_sequences=1, vocab_size=cfg.rec_vocab_size,
                              generator=seeded_generator(cfg.seed, warn=False))  # fmt: skip


def _plain_words(words: Sequence[str], plain: PlainTokens) -> tuple[str, ...]:
    if len(words) != plain.length:
        raise RuntimeError(f"{plain.length} plain tokens came back as {len(words)} words: {list(words)[:5]}")
    return tuple(words)


def _pairs(records: Sequence[Any], task: str, release: _Release, plain: PlainTokens | None) -> list[TextPair]:
    """The ``task`` prompts of ``records`` built on the released texts, each with its privatized plain tokens in front
    (their spans and targets, the original words' indices in the reconstruction vocabulary, on the pair)."""
    pairs = qa_pairs(records, task, release.texts)
    if release.plain is None:
        return pairs
    targets = plain.targets(0)
    out = []
    for pair, words in zip(pairs, release.plain, strict=True):
        starts = [sum(len(w) + 1 for w in words[:j]) for j in range(len(words))]
        spans = tuple((a, a + len(w), t) for a, w, t in zip(starts, words, targets, strict=True))
        out.append(TextPair(" ".join(words) + " " + pair.prompt, pair.answer, spans))
    return out


def _system(cfg: RaptQAConfig) -> str:
    """Whose client the run is: PPFT's Paraphrase or word-level d_chi baseline, or RAPT's (T2T / PCT2T rows)."""
    if cfg.privatizer == "paraphrase":
        return "paraphrase"
    return "dchi" if cfg.pos is None and cfg.oov_word is not None else "rapt"


def _paraphrase_client(cfg: RaptQAConfig):
    """The Paraphrase baseline's ``privatize``: every text resampled (no word bypasses the sampler: 0 sent verbatim
    as such); the paraphraser's run info is kept on the function (``privatize.info``)."""
    from ..lm.paraphrase import load_or_train_paraphraser, paraphrase
    from ..lm.text_controls import word_count

    model, tokenizer, info = load_or_train_paraphraser(
        cfg.decoder, cfg.paraphraser_out, n_pairs=cfg.paraphraser_pairs, epochs=cfg.paraphraser_epochs, seed=cfg.seed,
        progress=cfg.progress,
    )  # fmt: skip
    seed = cfg.seed if cfg.noise_seed is None else cfg.noise_seed

    def privatize(texts: list[str], part: int) -> _Release:
        out = paraphrase(model, tokenizer, list(texts), temperature=float(cfg.temperature),
                         generator=seeded_generator(seed * 3 + part, warn=False))  # fmt: skip
        return _Release(out, [word_count(t) for t in out], 0.0)

    privatize.info = info  # type: ignore[attr-defined]
    return privatize


def _copied_share(originals: list[str], released: list[str]) -> float:
    """Share of the original private words (lower case) that reappear among the released text's words."""
    from ..substitution.text import split_text, words_of

    hit = total = 0
    for o, r in zip(originals, released, strict=True):
        seen = {w.lower() for w in words_of(split_text(r))}
        words = [w.lower() for w in words_of(split_text(o))]
        hit += sum(w in seen for w in words)
        total += len(words)
    return hit / max(total, 1)


def _score(model, tokenizer, records, release: _Release, plain, labels, cfg: RaptQAConfig) -> dict[str, Any]:
    out = {}
    for task in QA_TASKS:
        pairs = _pairs(records, task, release, plain)
        answers = answer_prompts(model, tokenizer, [p.prompt for p in pairs], max_new_tokens=cfg.max_new_tokens,
                                 progress=cfg.progress)  # fmt: skip
        out[task] = score_answers(answers, records, task, labels)
    return out


def _head(cfg: RaptQAConfig, plain: PlainTokens | None):
    """The reconstruction head's maker (of the decoder's hidden width), or None without reconstruction."""
    if not cfg.reconstruction:
        return None
    return lambda hidden: ReconstructionHead(hidden, len(plain.vocabulary), cfg.rec_hidden)


def train_rapt_qa(cfg: RaptQAConfig) -> dict[str, Any]:
    """Privatize, fine-tune, answer (see the module docstring); writes and returns summary.json's content."""
    from ..data import load_privacyrestore, ppft_split, task_labels

    t0 = time.time()
    split = ppft_split(cfg.dataset)
    train, heldout = split["train"], split["heldout"][: cfg.eval_limit]
    extra = load_privacyrestore(Path(cfg.prompts)) if cfg.prompts is not None else []
    labels = task_labels(split["train"], split["validation"], split["heldout"], extra)
    privatize, mechanism, plain = _client(cfg)
    released = privatize(private_parts(train), 0)
    sent_train = released.texts
    pairs = _pairs(train, "mcqa", released, plain) + _pairs(train, "open", released, plain)
    fitted = tune_text_decoder(cfg, pairs, head=_head(cfg, plain), rec_weight=cfg.rec_weight)
    if plain is not None:
        plain.save(cfg.out)
    test = privatize(private_parts(heldout), 1)
    sent_test, words_test, kept = test.texts, test.words, test.kept
    if cfg.privatizer == "paraphrase":
        print(f"paraphrase baseline: tau {cfg.temperature:g}, paraphraser {privatize.info}", flush=True)
        for original, sent in list(zip(private_parts(heldout), sent_test))[:3]:
            print(f"  private:    {original}\n  paraphrase: {sent}", flush=True)
    scores = {"heldout": _score(fitted["model"], fitted["tokenizer"], heldout, test, plain, labels, cfg)}
    if extra:
        scores["prompts"] = _score(fitted["model"], fitted["tokenizer"], extra, privatize(private_parts(extra), 2),
                                   plain, labels, cfg)  # fmt: skip
    epsilon = None if mechanism is None else mechanism.privacy_loss_per_word().epsilon
    record = {
        "system": _system(cfg),
        "dataset": cfg.dataset,
        "eta": cfg.eta,
        "pos": cfg.pos,
        "table": None if mechanism is None else mechanism.table.name,
        "oov_word": cfg.oov_word,
        "privatizer": cfg.privatizer,
        "temperature": cfg.temperature,
        # the paraphrase's proxy loss per sampled token, 2 / tau (PPFT eq. 7: 2n / tau = B)
        "epsilon_per_word": 2.0 / cfg.temperature if cfg.privatizer == "paraphrase" else epsilon,
        "mean_privatized_words": sum(words_test) / max(len(words_test), 1),
        "kept_rate": kept,
        "controls": length_controls(train, sent_train, heldout, sent_test, labels),
        "n_train": len(train),
        "copied_word_share": _copied_share(private_parts(heldout), sent_test),
        "paraphraser": getattr(privatize, "info", None),
        "examples": [{"private": o, "sent": t} for o, t in list(zip(private_parts(heldout), sent_test))[:5]],
        "plain_length": cfg.plain_length,
        "reconstruction": cfg.reconstruction,
        "rec_vocab_size": None if plain is None else len(plain.vocabulary),
        # the head's cross-entropy per plain token, the mean of the last log_every steps (chance: ln rec_vocab_size)
        "final_rec_loss": fitted.get("final_rec_loss"),
        "plain_sent": None if test.plain is None else list(test.plain[0]),
        "scores": scores,
        "total_wall_s": round(time.time() - t0, 2),
    }
    loop = {k: v for k, v in fitted.items() if k not in ("model", "tokenizer")}
    return write_summary(Path(cfg.out), loop, record)
