"""RAPT for generation (the issue's NLG part): a local decoder fine-tuned on PCT2T-privatized Pri-* prompts, answering
privatized held-out prompts; the first side-by-side of PPFT and RAPT on one decoder, one dataset, one budget.

The client privatizes the private part of each record's prompt once (T2T or PCT2T at ``eta`` over the encoder's word
table; ``pos`` ``all`` by default: the paper, section IV-B, privatizes every category for clinical and legal text);
the public part (instruction, options) is sent as it is, as in PPFT. The server fine-tunes the decoder on the
privatized training prompts (4-option and open prompts built from the same privatized text: one release per record)
with :func:`textfree.lm.text_tuning.tune_text_decoder`, and answers the held-out records privatized with fresh noise.
The split is PPFT's (:func:`textfree.data.ppft_split`), so the held-out part is the one PPFT's figures use.

Without plain tokens and the reconstruction head: their decoder form (a head over the decoder's states at the
privatized plain words' sub-tokens) is not built; this is the paper's "PCT2T" row on a decoder, not "+Reconstruction".

The same run is PPFT's word-level d_chi baseline (Table 1; :mod:`textfree.lm.dchi`) with ``pos`` null (T2T),
``table`` a word table (``glove:PATH``) and ``oov_word`` set (every word through the mechanism). Each run also scores
the word-count controls of :mod:`textfree.lm.text_controls` on the very texts the client released.

With ``privatizer`` ``paraphrase`` the same run is PPFT's Paraphrase baseline (Table 1; :mod:`textfree.lm.paraphrase`):
the client replaces the private part by a paraphrase sampled at ``temperature`` (tau = 2n/B) from a paraphraser the
decoder was fine-tuned into on QQP's training duplicates (trained once under ``paraphraser_out``, then reused); the
public part is sent as it is. ``eta``, ``pos``, ``table`` and ``oov_word`` are then unused (null).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..lm.text_controls import length_controls
from ..lm.text_qa import QA_TASKS, private_parts, qa_pairs, score_answers
from ..lm.text_tuning import TextTuningConfig, answer_prompts, tune_text_decoder
from ..rng import seeded_generator
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


def _client(cfg: RaptQAConfig):
    """The client's privatization of a list of private texts (a fresh generator per call site), and its mechanism.
    ``privatize(texts, part)``: (released texts, privatized words per text, share of the words sent verbatim)."""
    if cfg.privatizer == "paraphrase":
        return _paraphrase_client(cfg), None
    from ..lm.dchi import fold_out_of_table
    from .train import build_mechanism

    mechanism = build_mechanism(cfg.table or cfg.encoder, cfg.eta, cfg.pos)
    seed = cfg.seed if cfg.noise_seed is None else cfg.noise_seed

    def privatize(texts: list[str], part: int) -> tuple[list[str], list[int], float]:
        if mechanism is None:
            return list(texts), [0] * len(texts), 1.0
        if cfg.oov_word is not None:
            texts = fold_out_of_table(texts, mechanism.table, cfg.oov_word)
        result = mechanism.privatize_detailed(list(texts), generator=seeded_generator(seed * 3 + part, warn=False))
        return list(result.texts), list(result.substituted_per_text), result.n_kept / max(result.n_words, 1)

    return privatize, mechanism


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

    def privatize(texts: list[str], part: int) -> tuple[list[str], list[int], float]:
        out = paraphrase(model, tokenizer, list(texts), temperature=float(cfg.temperature),
                         generator=seeded_generator(seed * 3 + part, warn=False))  # fmt: skip
        return out, [word_count(t) for t in out], 0.0

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


def _score(model, tokenizer, records, sent, labels, cfg: RaptQAConfig) -> dict[str, Any]:
    out = {}
    for task in QA_TASKS:
        pairs = qa_pairs(records, task, sent)
        answers = answer_prompts(model, tokenizer, [p.prompt for p in pairs], max_new_tokens=cfg.max_new_tokens,
                                 progress=cfg.progress)  # fmt: skip
        out[task] = score_answers(answers, records, task, labels)
    return out


def train_rapt_qa(cfg: RaptQAConfig) -> dict[str, Any]:
    """Privatize, fine-tune, answer (see the module docstring); writes and returns summary.json's content."""
    from ..data import load_privacyrestore, ppft_split, task_labels

    t0 = time.time()
    split = ppft_split(cfg.dataset)
    train, heldout = split["train"], split["heldout"][: cfg.eval_limit]
    extra = load_privacyrestore(Path(cfg.prompts)) if cfg.prompts is not None else []
    labels = task_labels(split["train"], split["validation"], split["heldout"], extra)
    privatize, mechanism = _client(cfg)
    sent_train, _, _ = privatize(private_parts(train), 0)
    pairs = qa_pairs(train, "mcqa", sent_train) + qa_pairs(train, "open", sent_train)
    fitted = tune_text_decoder(cfg, pairs)
    sent_test, words_test, kept = privatize(private_parts(heldout), 1)
    if cfg.privatizer == "paraphrase":
        print(f"paraphrase baseline: tau {cfg.temperature:g}, paraphraser {privatize.info}", flush=True)
        for original, released in list(zip(private_parts(heldout), sent_test))[:3]:
            print(f"  private:    {original}\n  paraphrase: {released}", flush=True)
    scores = {"heldout": _score(fitted["model"], fitted["tokenizer"], heldout, sent_test, labels, cfg)}
    if extra:
        sent_extra, _, _ = privatize(private_parts(extra), 2)
        scores["prompts"] = _score(fitted["model"], fitted["tokenizer"], extra, sent_extra, labels, cfg)
    epsilon = None if mechanism is None else mechanism.privacy_loss_per_word().epsilon
    record = {
        "system": "rapt",
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
        "scores": scores,
        "total_wall_s": round(time.time() - t0, 2),
    }
    loop = {k: v for k, v in fitted.items() if k not in ("model", "tokenizer")}
    return write_summary(Path(cfg.out), loop, record)
