"""The SERVER part of PPFT: projection P_psi + decoder LM + LoRA. It never sees the private text.

Its entry points take payload tensors (``vectors`` [B, S, d_e], ``mask`` [B, S]) or a :class:`Payload`, plus
the public strings (MCQA instruction + options) and, for training, the target strings. None of them has a
parameter for private text, and each refuses text where tensors belong with a ``TypeError``.

Sequence layout, one row per prompt, real content left-aligned from position 0::

    [BOS] [P(slot_1) ... P(slot_n)] [public tokens + suffix tokens] [target tokens] [EOS] [pad ...]
    labels: -100 everywhere except on the target tokens and the EOS

Padded slots of the payload are dropped row by row (a row's slots are the prefix its mask marks), so padding
never sits between a row's content; right padding then cannot influence a causal LM's real positions. For
generation the same rows (without target) are LEFT-padded and position ids are ``cumsum(mask) - 1``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ..atomic import read_json, write_json
from ..lm.adapters import lora_config, quiet_peft
from ..lm.generate import greedy_generate
from ..lm.loading import load_decoder, load_decoder_tokenizer
from ..lm.refs import decoder_ref, verify_decoder_sha
from ..payload import Payload
from ..training.config import LoopConfig
from ..training.loop import param_groups
from .config import TextFreeConfig
from .layout import public_rows, slot_prefix
from .projection import Projection, ProjectionConfig

__all__ = ["ServerModel", "ServerOutput", "PayloadMismatchError", "IGNORE_INDEX", "server_optimizer"]

IGNORE_INDEX = -100
PROJECTION_DIR = "projection"
ADAPTER_DIR = "adapter"
DECODER_DIR = "decoder"  # a run's own base decoder: written only when the base was trained (train_base)
DECODER_REF = "decoder_ref.json"
CONFIG_NAME = "textfree_config.json"


class PayloadMismatchError(ValueError):
    """A payload was made by a client this server model was not trained for (encoder or width)."""


@dataclass
class ServerOutput:
    """loss: mean cross-entropy over target tokens (None without targets); logits: [B, L, V], or, when
    ``logit_positions`` is set, [n_target_tokens, V] at the True positions of ``logit_positions`` [B, L];
    labels [B, L] (-100 except targets + EOS); attention_mask [B, L]; n_target_tokens: how many labels count."""

    loss: torch.Tensor | None
    logits: torch.Tensor
    labels: torch.Tensor
    attention_mask: torch.Tensor
    n_target_tokens: int
    logit_positions: torch.Tensor | None = None


def _require_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, (str, bytes)) or (
        isinstance(value, (list, tuple)) and any(isinstance(v, (str, bytes)) for v in value)
    ):
        raise TypeError(
            f"the server takes privatized payload tensors for {name!r}, never text (got {type(value).__name__}); "
            "privatize text on the client with textfree.Privatizer first"
        )
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name!r} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _require_strings(name: str, value: Any, n: int) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name!r} must be a list of {n} strings (one per row), got {type(value).__name__}")
    if len(value) != n or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{name!r} must be a list of {n} strings (one per row)")
    return list(value)


class ServerModel(torch.nn.Module):
    """``projection`` (P_psi) + ``decoder`` (a PEFT LoRA-wrapped causal LM) + the decoder's ``tokenizer``."""

    def __init__(self, projection: Projection, decoder, tokenizer, config: TextFreeConfig, decoder_ref: dict[str, Any]):
        super().__init__()
        if projection.config.in_dim != config.encoder_dim or projection.config.out_dim != config.decoder_dim:
            raise ValueError(
                f"projection {projection.config.in_dim}->{projection.config.out_dim} does not match the config's "
                f"dims {config.encoder_dim}->{config.decoder_dim}"
            )
        self.projection = projection
        self.decoder = decoder
        self.tokenizer = tokenizer
        self.config = config
        self.decoder_ref = decoder_ref
        self.trains_base = False

    # ------------------------------------------------------------------ construction / persistence
    @classmethod
    def build(
        cls,
        decoder: str | os.PathLike,
        config: TextFreeConfig,
        *,
        projection: ProjectionConfig | None = None,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> "ServerModel":
        """A fresh server part: base decoder from ``decoder`` (any HF causal LM name/path), new LoRA + projection."""
        from peft import get_peft_model

        base, tokenizer = load_decoder(decoder, device=str(device))
        d_d = int(base.get_input_embeddings().weight.shape[1])
        if d_d != config.decoder_dim:
            raise ValueError(f"decoder {str(decoder)!r} has embedding width {d_d}, config says {config.decoder_dim}")
        ref = decoder_ref(decoder, base)
        for p in base.parameters():
            p.requires_grad_(False)
        torch.manual_seed(seed)
        with quiet_peft():
            model = get_peft_model(base, lora_config(config.lora))
        proj = Projection(projection or ProjectionConfig(config.encoder_dim, d_d)).to(device)
        return cls(proj, model, tokenizer, config, ref)

    @classmethod
    def load(
        cls,
        run_dir: str | os.PathLike,
        *,
        trainable: bool = False,
        device: str | torch.device = "cpu",
        decoder: str | os.PathLike | None = None,
        check_decoder_sha: bool = True,
    ) -> "ServerModel":
        """Load projection + base decoder (from ``decoder_ref.json``, or ``decoder`` if given) + adapter.

        Refuses a base decoder whose sha256 differs from the recorded one unless ``check_decoder_sha=False``.
        """
        from peft import PeftModel

        from ..lm.hub import local_ref

        run = Path(run_dir)
        config = TextFreeConfig.from_dict(read_json(run / CONFIG_NAME))
        ref = read_json(run / DECODER_REF)
        # a published run records its bundled decoder relative to itself ("decoder"): resolve it inside the run
        location = str(decoder) if decoder is not None else local_ref(run, ref["name_or_path"])
        base, tokenizer = load_decoder(location, device=str(device))
        if check_decoder_sha:
            verify_decoder_sha(location, ref, run / DECODER_REF, base)
        for p in base.parameters():
            p.requires_grad_(False)
        with quiet_peft():
            model = PeftModel.from_pretrained(base, str(run / ADAPTER_DIR), is_trainable=trainable)
        model.to(device)
        proj = Projection.load(run / PROJECTION_DIR, device=device)
        proj.requires_grad_(trainable)
        # eval unless loaded for training: a served model must never run with dropout
        return cls(proj, model, tokenizer, config, {**ref, "name_or_path": location}).train(trainable)

    def save(self, run_dir: str | os.PathLike) -> Path:
        """Write projection/, adapter/, decoder_ref.json and textfree_config.json. The base decoder is not copied,
        unless it was trained (:meth:`train_base`): then it is written to decoder/, LoRA merged in, beside an
        adapter/ whose LoRA B matrices are zero, and decoder_ref.json points there; loading gives the same model."""
        run = Path(run_dir)
        run.mkdir(parents=True, exist_ok=True)
        self.projection.save(run / PROJECTION_DIR)
        if self.trains_base:
            self._save_trained_base(run)
        else:
            self.decoder.save_pretrained(str(run / ADAPTER_DIR))
        write_json(run / DECODER_REF, self.decoder_ref)
        write_json(run / CONFIG_NAME, self.config.to_dict())
        return run

    def train_base(self) -> None:
        """Full fine-tuning: every weight of the base decoder trains too, not only LoRA and the projection. A learned
        inversion attacker's option (``Stage2Config.train_decoder``); a PPFT deployment keeps the base frozen."""
        for p in self.decoder.parameters():
            p.requires_grad_(True)
        self.trains_base = True

    def _save_trained_base(self, run: Path) -> None:
        import copy

        with torch.no_grad():
            merged = copy.deepcopy(self.decoder).merge_and_unload()
            merged.save_pretrained(str(run / DECODER_DIR))
            self.tokenizer.save_pretrained(str(run / DECODER_DIR))
            identity = copy.deepcopy(self.decoder)
            for name, p in identity.named_parameters():
                if "lora_B" in name:
                    p.zero_()
            identity.save_pretrained(str(run / ADAPTER_DIR))
        self.decoder_ref = decoder_ref(run / DECODER_DIR, merged)

    # ------------------------------------------------------------------ properties
    @property
    def device(self) -> torch.device:
        return next(self.projection.parameters()).device

    @property
    def embed_dtype(self) -> torch.dtype:
        return self.decoder.get_input_embeddings().weight.dtype

    def lora_parameters(self) -> dict[str, torch.nn.Parameter]:
        return {n: p for n, p in self.decoder.named_parameters() if "lora_" in n}

    def decoder_parameters(self) -> dict[str, torch.nn.Parameter]:
        """The decoder weights that train: LoRA's, and every base weight too after :meth:`train_base`."""
        return {n: p for n, p in self.decoder.named_parameters() if self.trains_base or "lora_" in n}

    # ------------------------------------------------------------------ sequence assembly
    def _public_rows(self, public: list[str] | None, b: int) -> tuple[list[list[int]], list[str | None]]:
        return public_rows(self.tokenizer, self.config.template, public, b)

    def _target_ids(self, targets: list[str]) -> list[list[int]]:
        tpl = self.config.template
        eos = self.tokenizer.eos_token_id
        encoded = self.tokenizer([tpl.target_prefix + t for t in targets], add_special_tokens=False)["input_ids"]
        out = []
        for ids in encoded:
            if len(ids) > tpl.max_target_tokens:
                out.append(list(ids[: tpl.max_target_tokens]))  # cut: no EOS, the answer did not end
            else:
                out.append(list(ids) + ([eos] if eos is not None else []))
        return out

    def _rows(
        self, vectors: torch.Tensor, mask: torch.Tensor, public: list[str] | None, targets: list[str] | None
    ) -> tuple[list[torch.Tensor], list[list[int]]]:
        """Per row: its input embeddings [L_i, d_d] and labels (list of L_i ints)."""
        b = vectors.shape[0]
        embed = self.decoder.get_input_embeddings()
        dev, dtype = self.device, self.embed_dtype
        lengths = mask.sum(dim=1).tolist()
        bos = self.tokenizer.bos_token_id if self.config.template.add_bos else None
        pub, seen = self._public_rows(public, b)
        tgt = self._target_ids(targets) if targets is not None else [[] for _ in range(b)]
        rows, labels = [], []
        for i in range(b):
            head = [bos] if bos is not None else []
            token_ids = torch.tensor(head + pub[i] + tgt[i], dtype=torch.long, device=dev)
            tok_emb = embed(token_ids)
            n_head = len(head)
            slots = slot_prefix(
                self.projection,
                vectors[i, : int(lengths[i])].to(dev),
                self.config.summary_slots,
                seen[i],
                summary_only=self.config.summary_only,
            ).to(dtype)
            parts = [tok_emb[:n_head], slots, tok_emb[n_head:]]
            rows.append(torch.cat(parts, dim=0))
            labels.append([IGNORE_INDEX] * (n_head + slots.shape[0] + len(pub[i])) + tgt[i])
        return rows, labels

    def _check_inputs(
        self, vectors, mask, public, targets
    ) -> tuple[torch.Tensor, torch.Tensor, list[str] | None, list[str] | None]:
        vectors = _require_tensor("vectors", vectors)
        mask = _require_tensor("mask", mask)
        if vectors.dim() != 3 or vectors.shape[-1] != self.config.encoder_dim:
            raise ValueError(f"vectors must be [B, S, {self.config.encoder_dim}], got {tuple(vectors.shape)}")
        if tuple(mask.shape) != tuple(vectors.shape[:2]):
            raise ValueError(f"mask must be {tuple(vectors.shape[:2])}, got {tuple(mask.shape)}")
        mask = mask.to(torch.bool).cpu()
        lengths = mask.sum(dim=1)
        if not torch.equal(torch.arange(mask.shape[1]).unsqueeze(0) < lengths.unsqueeze(1), mask):
            raise ValueError("mask rows must be prefixes (real slots first, then padding)")
        b = vectors.shape[0]
        return vectors, mask, _require_strings("public", public, b), _require_strings("targets", targets, b)

    # ------------------------------------------------------------------ training / scoring
    def forward(
        self,
        vectors: torch.Tensor,
        mask: torch.Tensor,
        *,
        public: Sequence[str] | None = None,
        targets: Sequence[str] | None = None,
        all_logits: bool = False,
    ) -> ServerOutput:
        """Teacher-forced pass over [BOS][slots][public][targets][EOS]; loss on target tokens + EOS only.

        With targets and ``all_logits=False`` the LM head runs only where a target token is predicted
        (``logits_to_keep``): ``logits`` is then [n_target_tokens, V] and ``logit_positions`` says where.
        """
        vectors, mask, public, targets = self._check_inputs(vectors, mask, public, targets)
        rows, labels = self._rows(vectors, mask, public, targets)
        b, length = len(rows), max(r.shape[0] for r in rows)
        self._check_length(length)
        dev = self.device
        embeds = rows[0].new_zeros(b, length, rows[0].shape[-1])
        attention = torch.zeros(b, length, dtype=torch.long, device=dev)
        label_t = torch.full((b, length), IGNORE_INDEX, dtype=torch.long, device=dev)
        for i, (row, lab) in enumerate(zip(rows, labels)):
            embeds[i, : row.shape[0]] = row
            attention[i, : row.shape[0]] = 1
            label_t[i, : len(lab)] = torch.tensor(lab, dtype=torch.long, device=dev)
        position_ids = torch.arange(length, device=dev).unsqueeze(0).expand(b, length)
        # position t predicts the token at t + 1: these are the positions whose prediction is a target token
        predicts = torch.zeros_like(label_t, dtype=torch.bool)
        predicts[:, :-1] = label_t[:, 1:] != IGNORE_INDEX
        n_tokens = int(predicts.sum())
        inputs = {"inputs_embeds": embeds, "attention_mask": attention, "position_ids": position_ids}
        sparse = targets is not None and not all_logits and self._supports_logits_to_keep
        if sparse:
            logits = self.decoder(**inputs, logits_to_keep=predicts).logits.reshape(n_tokens, -1)
        else:
            logits = self.decoder(**inputs).logits
        loss = None
        if targets is not None:
            gold = label_t[:, 1:][predicts[:, :-1]]  # the token each predicting position must produce
            chosen = logits if sparse else logits[predicts]
            loss = F.cross_entropy(chosen.float(), gold, reduction="sum") / max(n_tokens, 1)
        return ServerOutput(loss, logits, label_t, attention, n_tokens, predicts if sparse else None)

    @torch.no_grad()
    def score_targets(
        self, vectors: torch.Tensor, mask: torch.Tensor, *, public: Sequence[str] | None, targets: Sequence[str]
    ) -> torch.Tensor:
        """Log-probability [B] of generating exactly each row's target (answer tokens + EOS) after its payload and
        public part: ``sum_t log p(target_t | slots, public, target_<t)``, float64."""
        was_training = self.training
        self.eval()
        try:
            out = self.forward(vectors, mask, public=public, targets=targets)
        finally:
            self.train(was_training)
        predicts = out.logit_positions
        if predicts is None:  # the decoder computed logits everywhere
            predicts = torch.zeros_like(out.labels, dtype=torch.bool)
            predicts[:, :-1] = out.labels[:, 1:] != IGNORE_INDEX
            logits = out.logits[predicts]
        else:
            logits = out.logits
        gold = out.labels[:, 1:][predicts[:, :-1]]
        token_logp = torch.log_softmax(logits.double(), dim=-1).gather(-1, gold.unsqueeze(-1)).squeeze(-1)
        rows = predicts.nonzero()[:, 0]
        return torch.zeros(out.labels.shape[0], dtype=torch.float64, device=token_logp.device).index_add_(
            0, rows, token_logp
        )

    @torch.no_grad()
    def rank_options(
        self,
        vectors: torch.Tensor,
        mask: torch.Tensor,
        *,
        public: Sequence[str] | None,
        options: Sequence[Sequence[str]],
        batch_size: int = 64,
    ) -> list[str]:
        """Per row, the option the model is most likely to answer in full (:meth:`score_targets`) instead of a free
        generation: multiple choice scored by likelihood, as lm-evaluation-harness does. ``options[i]`` are row i's
        option texts (the public options block); at most ``batch_size`` (row, option) pairs go through one pass."""
        vectors, mask, public, _ = self._check_inputs(vectors, mask, public, None)
        if not isinstance(options, (list, tuple)) or len(options) != vectors.shape[0]:
            raise ValueError(f"options must be a list with one entry per payload row ({vectors.shape[0]})")
        for i, opts in enumerate(options):
            if (
                not isinstance(opts, (list, tuple))
                or not opts
                or not all(isinstance(o, str) and o.strip() for o in opts)
            ):
                raise ValueError(f"options[{i}] must be a non-empty list of non-empty strings, got {opts!r}")
        rows = [i for i, opts in enumerate(options) for _ in opts]
        flat = [o for opts in options for o in opts]
        scores = []
        for start in range(0, len(rows), batch_size):
            index = torch.tensor(rows[start : start + batch_size])
            n = int(mask[index].sum(dim=1).max()) if mask.shape[1] else 0
            scores.append(
                self.score_targets(
                    vectors[index, :n],
                    mask[index, :n],
                    targets=flat[start : start + batch_size],
                    public=None if public is None else [public[i] for i in index.tolist()],
                )
            )
        scores_t = torch.cat(scores)
        best, start = [], 0
        for opts in options:
            best.append(opts[int(scores_t[start : start + len(opts)].argmax())])
            start += len(opts)
        return best

    def _check_length(self, length: int) -> None:
        limit = getattr(self.decoder.config, "max_position_embeddings", None)
        if limit and length > limit and not getattr(self, "_warned_length", False):
            self._warned_length = True
            warnings.warn(
                f"sequences of {length} positions exceed the decoder's max_position_embeddings ({limit}); lower "
                "max_private_tokens / max_public_tokens / max_target_tokens (or max_new_tokens)",
                stacklevel=3,
            )

    @property
    def _supports_logits_to_keep(self) -> bool:
        import inspect

        base = self.decoder.get_base_model() if hasattr(self.decoder, "get_base_model") else self.decoder
        return "logits_to_keep" in inspect.signature(base.forward).parameters

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def generate(
        self,
        vectors: torch.Tensor,
        mask: torch.Tensor,
        *,
        public: Sequence[str] | None = None,
        max_new_tokens: int = 32,
        temperature: float = 0.0,
        top_p: float = 1.0,
        generators: list[torch.Generator] | None = None,
    ) -> list[str]:
        """Answers for a batch of payload rows (+ optional public strings): greedy, or sampled at ``temperature`` > 0
        with nucleus ``top_p`` and one generator per row (see :func:`~textfree.lm.generate.next_tokens`)."""
        vectors, mask, public, _ = self._check_inputs(vectors, mask, public, None)
        was_training = self.training
        self.eval()
        try:
            rows, _ = self._rows(vectors, mask, public, None)
            b, length = len(rows), max(r.shape[0] for r in rows)
            self._check_length(length + max_new_tokens)
            embeds = rows[0].new_zeros(b, length, rows[0].shape[-1])
            attention = torch.zeros(b, length, dtype=torch.long, device=self.device)
            for i, row in enumerate(rows):  # left padding
                embeds[i, length - row.shape[0] :] = row
                attention[i, length - row.shape[0] :] = 1
            ids = greedy_generate(
                self.decoder,
                embeds,
                attention,
                max_new_tokens=max_new_tokens,
                eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=self.tokenizer.pad_token_id,
                temperature=temperature,
                top_p=top_p,
                generators=generators,
            )
        finally:
            self.train(was_training)
        return [self.tokenizer.decode(row, skip_special_tokens=True).strip() for row in ids]

    def check_payload(self, payload: Payload) -> None:
        """Refuse payloads this model cannot read: token-level payloads, another width, another encoder."""
        if payload.kind != "pooled":
            raise PayloadMismatchError(f"PPFT takes pooled payloads, got kind {payload.kind!r}")
        if payload.encoder.dim != self.config.encoder_dim:
            raise PayloadMismatchError(
                f"payload width {payload.encoder.dim} != this model's encoder width {self.config.encoder_dim}"
            )
        want, got = self.config.encoder_sha256, payload.encoder.sha256
        if want and got and want != got:
            raise PayloadMismatchError(
                f"payload made by encoder {payload.encoder.id!r} (sha256 {got[:12]}...), but this model was trained "
                f"with encoder sha256 {want[:12]}...: use the encoder/ of this run on the client"
            )
        if payload.privatization.k != self.config.k:
            warnings.warn(
                f"payload pooled with k={payload.privatization.k}, model trained with k={self.config.k}", stacklevel=3
            )

    def _accept(self, payload: Payload, public: Sequence[str] | None, entry: str) -> list[str] | None:
        """The payload entry points' checks: a validated :class:`Payload` this model can read; returns the public
        strings (``public``, else those the client sent with the vectors)."""
        if not isinstance(payload, Payload):
            raise TypeError(
                f"ServerModel.{entry} takes a textfree Payload (privatized vectors), got {type(payload).__name__}; "
                "the server never takes prompt text"
            )
        self.check_payload(payload)
        public = payload.public if public is None else _require_strings("public", public, payload.batch_size)
        if public is not None:
            limit = self.config.template.max_public_tokens
            cut = sum(len(ids) > limit for ids in self.tokenizer(list(public), add_special_tokens=False)["input_ids"])
            if cut:
                warnings.warn(
                    f"{cut} public text(s) longer than max_public_tokens ({limit}) were cut: the model does not "
                    "see their end",
                    stacklevel=3,
                )
        return public

    def answer(
        self,
        payload: Payload,
        *,
        public: Sequence[str] | None = None,
        max_new_tokens: int = 32,
        batch_size: int = 16,
    ) -> list[str]:
        """The server's inference entry point: a validated :class:`Payload` in, one answer string per row out.

        ``public`` defaults to ``payload.public`` (the public parts the client sent with the vectors).
        """
        public = self._accept(payload, public, "answer")
        answers: list[str] = []
        for start in range(0, payload.batch_size, batch_size):
            sl = slice(start, start + batch_size)
            n = int(payload.mask[sl].sum(dim=1).max())
            answers += self.generate(
                payload.vectors[sl, :n],
                payload.mask[sl, :n],
                public=None if public is None else public[sl],
                max_new_tokens=max_new_tokens,
            )
        return answers

    def choose(
        self,
        payload: Payload,
        options: Sequence[Sequence[str]],
        *,
        public: Sequence[str] | None = None,
        batch_size: int = 64,
    ) -> list[str]:
        """:meth:`answer` for multiple choice: per payload row, the option (of ``options[i]``) the model is most
        likely to answer (:meth:`rank_options`). The options are public text the client sent (its options block)."""
        public = self._accept(payload, public, "choose")
        return self.rank_options(payload.vectors, payload.mask, public=public, options=options, batch_size=batch_size)


def load_server_tokenizer(run_dir: str | os.PathLike):
    """Only the decoder's tokenizer of a run (for data preparation without loading weights)."""
    ref = read_json(Path(run_dir) / DECODER_REF)
    return load_decoder_tokenizer(ref["name_or_path"])


def server_optimizer(server: torch.nn.Module, cfg: LoopConfig) -> torch.optim.Optimizer:
    """AdamW over the server part's projection + LoRA parameters (stage 2 and fine-tuning jobs; with a trained base,
    :meth:`~textfree.ppft.server.ServerModel.train_base`, every decoder weight)."""
    params = list(server.projection.parameters()) + list(server.decoder_parameters().values())
    return torch.optim.AdamW(param_groups([(params, cfg.lr)], cfg.weight_decay))
