"""PPFT's PrivacyRestore baseline on Pri-DDX, end to end: the client (:mod:`textfree.lm.privacy_restore`) sends
each prompt with its privacy spans removed and a noisy meta vector; the server's decoder answers with the restoration
vectors applied (:mod:`textfree.lm.restoration`); the same release is attacked (:mod:`textfree.attacks.meta_vector`).

Server training. PrivacyRestore's repository keeps its LLM frozen and trains the bank alone; here the decoder has never
seen Pri-DDX's format, so, as for the other text baselines (:mod:`textfree.rapt.generation`), it is fine-tuned with
``method`` (LoRA by default) on the masked training prompts, and the bank trains with it, in the project's one loop,
on the answer's loss with the clean meta vectors (the repository trains without noise too; its ORPO term, which needs
the frozen model's own answers to the full and masked prompts, is left out). The ``heads`` selected heads are the
ones whose last-token output moves most when the spans are removed (:func:`textfree.lm.restoration.select_heads`);
the bank starts from those moves. Test: the held-out rows are released once with fresh noise at ``epsilon`` and
scored on both tasks with PPFT's rules; the word-count controls of :mod:`textfree.lm.text_controls` run on the same
masked texts.

The attack uses the training rows as the attacker's own data (releases with their own noise), and reports ROUGE-L of
its reconstruction against the private part and the recall of symptoms and antecedents, beside what the masked text
alone gives, what the same attack gets from noiseless meta vectors and the best constant guess (the medoid training
prompt: Pri-DDX prompts share a template).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from ..lm.text_tuning import TextTuningConfig

__all__ = ["PrivacyRestoreQAConfig", "span_vocabulary", "train_privacy_restore_qa"]

BANK_FILE, BANK_JSON = "restoration.safetensors", "restoration.json"


@dataclass(kw_only=True)
class PrivacyRestoreQAConfig(TextTuningConfig):
    """PrivacyRestore on a Pri-* dataset: a decoder and its restoration bank trained, scored and attacked."""

    dataset: str = field(default="pri-ddx", metadata={"help": "Pri-* dataset with marked spans (ppft_split)."})
    encoder: str = field(default="default", metadata={"help": "The client's attention encoder ('default': MiniLM)."})
    epsilon: float | None = field(
        default=75.0, metadata={"help": "L2-Laplace epsilon of the meta vector (B / 2 = 75); null: no noise."}
    )
    heads: int = field(default=4, metadata={"help": "Attention heads that receive restoration vectors."})
    eval_limit: int | None = field(default=300, metadata={"help": "Score the first N held-out records (null: all)."})
    max_new_tokens: int = field(default=16, metadata={"help": "Answer length."})
    noise_seed: int | None = field(default=None, metadata={"help": "Seeds the release noise (null: seed)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epsilon is not None and not (isinstance(self.epsilon, (int, float)) and self.epsilon > 0):
            raise ValueError(f"epsilon must be a number > 0 or null, got {self.epsilon!r}")
        if isinstance(self.heads, bool) or not isinstance(self.heads, int) or self.heads < 1:
            raise ValueError(f"heads must be an integer >= 1, got {self.heads!r}")
        if self.eval_limit is not None and self.eval_limit < 1:
            raise ValueError(f"eval_limit must be >= 1 or null, got {self.eval_limit}")


def _spans(record: Any) -> tuple[list[str], list[str]]:
    """(removed, kept) spans of a record; an error naming it when the dataset marks none."""
    a = record.attributes
    removed = a.get("restore_symptoms")
    if not removed or not a.get("question_mask"):
        raise ValueError(f"record {record.id} has no marked privacy spans (restore_symptoms / question_mask): "
                         "PrivacyRestore needs Pri-DDX's marked spans")  # fmt: skip
    return list(removed), list(a.get("symptoms_remain", [])) + list(a.get("antecedents_remain", []))


def span_vocabulary(records: Sequence[Any]) -> list[str]:
    """The public span list: every symptom and antecedent name the records use, sorted (Pri-DDX's evidences_list)."""
    names = set()
    for r in records:
        a = r.attributes
        names.update(a.get("symptoms", []), a.get("antecedents", []), a.get("restore_symptoms", []))
    return sorted(names)


def client_weights(records: Sequence[Any], index: dict[str, int], encoder: Any, tokenizer: Any):
    """([n, E] span weights, [n] multipliers, masked private texts) the client computes for ``records``."""
    from ..data import mcqa_prompt
    from ..lm.privacy_restore import span_weights

    weights = torch.zeros(len(records), len(index))
    multipliers, masked = [], []
    for i, r in enumerate(records):
        removed, kept = _spans(r)
        w, m = span_weights(encoder, tokenizer, mcqa_prompt(r).private, removed, kept)
        for span, value in zip(removed, w, strict=True):
            weights[i, index[span.lower()]] += value
        multipliers.append(m)
        masked.append(r.attributes["question_mask"])
    return weights, torch.tensor(multipliers), masked


class _Restored(torch.nn.Module):
    """The decoder and its bank as one trainable module: forward(ids..., weights, multiplier) -> the LM loss."""

    def __init__(self, decoder: torch.nn.Module, bank: torch.nn.Module) -> None:
        super().__init__()
        self.decoder, self.bank = decoder, bank

    def forward(self, weights: torch.Tensor, multiplier: torch.Tensor, **batch: torch.Tensor) -> torch.Tensor:
        from ..lm.restoration import restored

        with restored(self.decoder, self.bank.heads, self.bank.meta(weights), multiplier):
            return self.decoder(**batch).loss


def _encoder(name: str):
    from ..encoders.loading import load_hf_encoder

    tokenizer, model, _, _ = load_hf_encoder(None if name == "default" else name)
    model.set_attn_implementation("eager")  # attention weights, not a fused kernel
    return model.eval(), tokenizer


def _build(cfg: PrivacyRestoreQAConfig, train: Sequence[Any], n_spans: int, index: dict[str, int]):
    """(decoder with its adapter, tokenizer, bank): heads chosen and the bank started on the base decoder."""
    from ..data import mcqa_prompt
    from ..lm.adapters import apply_adapter
    from ..lm.loading import load_decoder
    from ..lm.restoration import RestorationBank, attention_heads, head_outputs, select_heads
    from ..rng import seeded_generator

    base, tokenizer = load_decoder(cfg.decoder)
    full = head_outputs(base, tokenizer, [mcqa_prompt(r).private for r in train])
    masked = head_outputs(base, tokenizer, [r.attributes["question_mask"] for r in train])
    heads = select_heads(full, masked, cfg.heads)
    bank = RestorationBank(n_spans, heads, attention_heads(base)[2])
    ids = [[index[s.lower()] for s in _spans(r)[0]] for r in train]
    bank.init_from_shift(full, masked, ids, generator=seeded_generator(cfg.seed, warn=False))
    return apply_adapter(base, cfg.adapter(), "CAUSAL_LM"), tokenizer, bank


def _fit(cfg: PrivacyRestoreQAConfig, model: _Restored, tokenizer: Any, items: list[tuple]) -> dict[str, Any]:
    from ..accel import make_accelerator
    from ..lm.text_tuning import encode_pairs
    from ..training.loop import fit, param_groups

    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(param_groups([(trainable, cfg.lr)], cfg.weight_decay))

    def collate(batch: list[tuple]) -> dict[str, torch.Tensor]:
        encoded = encode_pairs(tokenizer, [b[0] for b in batch], max_length=cfg.max_length)
        extra = {"weights": torch.stack([b[1] for b in batch]), "multiplier": torch.stack([b[2] for b in batch])}
        return encoded | extra

    return fit(cfg=cfg, model=model, optimizer=optimizer, n_examples=len(items), epoch_examples=lambda epoch: items,
               collate=collate, loss_fn=lambda m, batch: m(**batch),
               accelerator=make_accelerator(cpu=cfg.cpu))  # fmt: skip


def _save(run: Path, model: _Restored, tokenizer: Any, spans: list[str]) -> None:
    from ..atomic import atomic_save_tensors, write_json

    model.decoder.save_pretrained(run / "adapter")
    tokenizer.save_pretrained(run / "tokenizer")
    atomic_save_tensors(run / BANK_FILE, {"vectors": model.bank.vectors.detach().contiguous()})
    write_json(run / BANK_JSON, {"heads": model.bank.heads, "width": model.bank.width, "spans": spans})


@torch.no_grad()
def _answers(model: _Restored, tokenizer: Any, prompts: list[str], releases: Sequence[Any],
             cfg: PrivacyRestoreQAConfig) -> list[str]:  # fmt: skip
    """The server's answer to each prompt (the release's masked text, then the public part in clear) with that
    release's meta vector and multiplier applied."""
    from tqdm.auto import tqdm

    from ..lm.generate import generate_text
    from ..lm.restoration import restored

    out = []
    for prompt, release in tqdm(list(zip(prompts, releases, strict=True)), desc="answer", unit="prompt",
                                disable=not cfg.progress):  # fmt: skip
        with restored(model.decoder, model.bank.heads, release.meta[None], torch.tensor([release.multiplier])):
            text = generate_text(model.decoder, tokenizer, [prompt], max_new_tokens=cfg.max_new_tokens,
                                 add_special_tokens=False)[0]  # fmt: skip
        out.append(text.strip())
    return out


def _attack(bank: Any, spans: list[str], train: Sequence[Any], heldout: Sequence[Any], shadow: torch.Tensor,
            released: dict[str, torch.Tensor], masked_test: list[str]) -> dict[str, float]:  # fmt: skip
    """The matched-filter attack (:mod:`textfree.attacks.meta_vector`) on the held-out releases (``released``: name
    -> meta vectors), its threshold fitted on the attacker's own noisy releases of the training rows (``shadow``)."""
    from ..attacks.learned import medoid_text
    from ..attacks.meta_vector import fill_spans, fit_threshold, predict_spans, span_recall, span_scores
    from ..data import mcqa_prompt
    from ..metrics.text import corpus_rouge_l

    index = {s.lower(): i for i, s in enumerate(spans)}
    directions = bank.meta(torch.eye(len(spans))).detach()
    truth = [{index[s.lower()] for s in _spans(r)[0]} for r in train]
    threshold = fit_threshold(span_scores(shadow, directions), truth)
    antecedents = {a for r in train for a in r.attributes.get("antecedents", [])}
    private = [mcqa_prompt(r).private for r in heldout]
    visible = [{s for s in spans if s.lower() in t.lower()} for t in masked_test]
    prior = medoid_text([mcqa_prompt(r).private for r in train])
    out = {"rouge_l_text_only": corpus_rouge_l(masked_test, private).f1,
           "rouge_l_prior": corpus_rouge_l([prior] * len(private), private).f1}  # fmt: skip
    for part in ("symptoms", "antecedents"):
        out[f"recall_{part}_text_only"] = span_recall([r.attributes.get(part, []) for r in heldout], visible)
    for name, meta in released.items():
        found = [{spans[i] for i in p} for p in predict_spans(span_scores(meta, directions), threshold)]
        guesses = [fill_spans(t, sorted(f), antecedents) for t, f in zip(masked_test, found, strict=True)]
        out[f"rouge_l{name}"] = corpus_rouge_l(guesses, private).f1
        for part in ("symptoms", "antecedents"):
            truth_part = [r.attributes.get(part, []) for r in heldout]
            out[f"recall_{part}{name}"] = span_recall(truth_part, [v | f for v, f in zip(visible, found, strict=True)])
    return out


def train_privacy_restore_qa(cfg: PrivacyRestoreQAConfig) -> dict[str, Any]:
    """Train (or resume) the decoder and bank, release and score the held-out rows, attack the releases; writes and
    returns summary.json's content."""
    from ..data import ppft_split, task_labels
    from ..lm.privacy_restore import Release, noisy_meta
    from ..lm.text_controls import length_controls
    from ..lm.text_qa import QA_TASKS, qa_pairs, score_answers
    from ..rng import seeded_generator
    from ..training.runs import check_run_dir, prepare_run_dir, write_summary

    t0 = time.time()
    split = ppft_split(cfg.dataset)
    train, heldout = split["train"], split["heldout"][: cfg.eval_limit]
    labels = task_labels(split["train"], split["validation"], split["heldout"])
    spans = span_vocabulary(split["train"] + split["validation"] + split["heldout"])
    index = {s.lower(): i for i, s in enumerate(spans)}
    encoder, enc_tok = _encoder(cfg.encoder)
    w_train, m_train, masked_train = client_weights(train, index, encoder, enc_tok)
    w_test, m_test, masked_test = client_weights(heldout, index, encoder, enc_tok)
    check_run_dir(cfg)
    torch.manual_seed(cfg.seed)
    decoder, tokenizer, bank = _build(cfg, train, len(spans), index)
    run = prepare_run_dir(cfg)
    pairs = qa_pairs(train, "mcqa", masked_train) + qa_pairs(train, "open", masked_train)
    items = [(p, w_train[i % len(train)], m_train[i % len(train)]) for i, p in enumerate(pairs)]
    model = _Restored(decoder, bank)
    fitted = _fit(cfg, model, tokenizer, items)
    model.eval()
    _save(run, model, tokenizer, spans)
    seed = cfg.seed if cfg.noise_seed is None else cfg.noise_seed
    with torch.no_grad():
        clean_test = bank.meta(w_test)
        meta_test = noisy_meta(clean_test, cfg.epsilon, generator=seeded_generator(seed * 3 + 1, warn=False))
        shadow = noisy_meta(bank.meta(w_train), cfg.epsilon, generator=seeded_generator(seed * 3 + 2, warn=False))
    releases = [Release(t, v, float(m)) for t, v, m in zip(masked_test, meta_test, m_test, strict=True)]
    scores = {"heldout": {}}
    for task in QA_TASKS:
        prompts = [p.prompt for p in qa_pairs(heldout, task, [r.text for r in releases])]
        answers = _answers(model, tokenizer, prompts, releases, cfg)
        scores["heldout"][task] = score_answers(answers, heldout, task, labels)
    attack = _attack(bank, spans, train, heldout, shadow, {"": meta_test, "_clean_meta": clean_test}, masked_test)
    record = {
        "system": "privacy_restore",
        "dataset": cfg.dataset,
        "epsilon": cfg.epsilon,
        "epsilon_per_release": None if cfg.epsilon is None else 2.0 * cfg.epsilon,
        "heads": bank.heads,
        "meta_dim": bank.dim,
        "noise_norm_mean": None if cfg.epsilon is None else bank.dim / cfg.epsilon,
        "n_spans": len(spans),
        "cos_released_clean": float(torch.nn.functional.cosine_similarity(meta_test, clean_test).mean()),
        "controls": length_controls(train, masked_train, heldout, masked_test, labels),
        "attack": attack,
        "n_train": len(train),
        "examples": [
            {"sent": r.attributes["question_mask"], "multiplier": float(m)} for r, m in list(zip(heldout, m_test))[:5]
        ],  # fmt: skip
        "scores": scores,
        "total_wall_s": round(time.time() - t0, 2),
    }
    loop = {k: v for k, v in fitted.items() if k != "model"}
    return write_summary(Path(cfg.out), loop, record)
