"""``TextFreeLM``: PPFT's whole model, the CLIENT part (encoder + privatization) joined to the SERVER part.

    private text --(client)--> encoder --> k-pool --> L2 normalise --> [noise --> renormalise] --> payload
    payload + public text --(server)--> P_psi --> decoder LM with LoRA (continuous prefix) --> answer

``encode_slots`` is the client's pipeline without noise and *with* gradients (stage 1 trains the encoder
through pooling and normalisation); ``privatizer()`` is the client as users run it (noise, payload);
``server`` (:class:`~textfree.ppft.server.ServerModel`) is all the server holds and sees.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch

from ..atomic import read_json, write_json
from ..encoders import ContextualEncoder, weights_sha256
from ..encoders.loading import encoder_id
from ..lm.adapters import AdapterSettings
from ..lm.hub import copy_tree, local_ref, push_saved, replace_dir, resolve_pretrained
from ..mechanisms.base import get_mechanism_class
from ..mechanisms.factory import make_noise
from ..mechanisms.transforms import k_pool, l2_normalize
from ..payload import Payload
from ..privatizer import Privatizer
from .checkpoint import load_center, save_center
from .config import PromptTemplate, TextFreeConfig
from .projection import ProjectionConfig
from .server import CONFIG_NAME, DECODER_DIR, DECODER_REF, ServerModel, ServerOutput

__all__ = ["TextFreeLM", "ENCODER_DIR", "run_decoder"]

ENCODER_DIR = "encoder"


def run_decoder(run_dir: str | os.PathLike) -> str | None:
    """The base decoder a run names in ``decoder_ref.json``, as a path inside the run when it bundles it (a published
    run records ``"decoder"``, relative to itself); None for a run without a decoder_ref.json."""
    ref_file = Path(run_dir) / DECODER_REF
    if not ref_file.is_file():
        return None
    location = read_json(ref_file).get("name_or_path")
    return local_ref(run_dir, location) if isinstance(location, str) else None


def _bundle_decoder(run: Path, include_decoder: bool | None) -> None:
    """Make ``run`` portable: a base decoder recorded by a local path is copied into ``run/decoder`` (unless
    ``include_decoder`` is False) and recorded as ``"decoder"``, relative to the run; a hub id stays as it is."""
    ref = read_json(run / DECODER_REF)
    location = Path(str(ref.get("name_or_path", "")))
    bundled = run / DECODER_DIR
    if location.is_absolute() and location.resolve() == bundled.resolve():
        pass  # a trained base (ServerModel.train_base) is written there already
    elif location.is_dir() and include_decoder is not False:
        copy_tree(location, bundled)
    else:
        if include_decoder and not location.is_dir():
            raise ValueError(f"include_decoder: the base decoder {str(location)!r} is not a local directory")
        return
    write_json(run / DECODER_REF, {**ref, "name_or_path": DECODER_DIR})


class TextFreeLM(torch.nn.Module):
    """``encoder`` (client, a :class:`ContextualEncoder`) + ``server`` (:class:`ServerModel`)."""

    def __init__(self, encoder: ContextualEncoder, server: ServerModel, center: torch.Tensor | None = None):
        super().__init__()
        if encoder.dim != server.config.encoder_dim:
            raise ValueError(f"encoder width {encoder.dim} != the server's encoder_dim {server.config.encoder_dim}")
        self.encoder = encoder
        self.server = server
        self.encoder.max_length = server.config.max_private_tokens
        self.center = center  # the client's public slot centre (config.center_sha256), or None as PPFT

    @property
    def config(self) -> TextFreeConfig:
        return self.server.config

    # ------------------------------------------------------------------ construction / persistence
    @classmethod
    def build(
        cls,
        decoder: str | os.PathLike,
        *,
        encoder: str | os.PathLike | None = None,
        k: int = 4,
        mechanism: str = "l2_laplace",
        projection: str = "linear",
        projection_hidden: int | None = None,
        lora: AdapterSettings | None = None,
        template: PromptTemplate | None = None,
        max_private_tokens: int = 256,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> "TextFreeLM":
        """A fresh (untrained) model: ``encoder`` (default all-MiniLM-L6-v2) and base ``decoder`` by name or path."""
        enc = ContextualEncoder.from_pretrained(encoder, max_length=max_private_tokens, device=str(device))
        from transformers import AutoConfig

        dec_cfg = AutoConfig.from_pretrained(str(decoder))
        d_d = int(getattr(dec_cfg, "hidden_size", None) or dec_cfg.get_text_config().hidden_size)
        get_mechanism_class(mechanism)  # fail early on an unknown family
        config = TextFreeConfig(
            encoder_id=encoder_id(encoder),
            encoder_sha256=enc.sha256,
            encoder_dim=enc.dim,
            decoder_dim=d_d,
            k=k,
            mechanism=mechanism,
            max_private_tokens=max_private_tokens,
            template=template or PromptTemplate(),
            lora=lora or AdapterSettings(),
        )
        proj = ProjectionConfig(enc.dim, d_d, kind=projection, hidden_dim=projection_hidden)
        server = ServerModel.build(decoder, config, projection=proj, device=device, seed=seed)
        return cls(enc, server)

    @classmethod
    def load(
        cls,
        run_dir: str | os.PathLike,
        *,
        trainable: bool = False,
        device: str | torch.device = "cpu",
        decoder: str | os.PathLike | None = None,
        check_decoder_sha: bool = True,
    ) -> "TextFreeLM":
        """Load a run directory (encoder/, projection/, adapter/, decoder_ref.json, textfree_config.json)."""
        run = Path(run_dir)
        if not (run / CONFIG_NAME).is_file():
            raise FileNotFoundError(f"{str(run)!r} is not a PPFT run directory (no {CONFIG_NAME})")
        if decoder is None:
            decoder = run_decoder(run)  # a bundled decoder (relative to the run), else decoder_ref's as it is
        config = TextFreeConfig.from_dict(read_json(run / CONFIG_NAME))
        enc = ContextualEncoder.from_pretrained(
            run / ENCODER_DIR, max_length=config.max_private_tokens, device=str(device)
        )
        enc.name = config.encoder_id
        server = ServerModel.load(
            run, trainable=trainable, device=device, decoder=decoder, check_decoder_sha=check_decoder_sha
        )
        lm = cls(enc, server, load_center(run, config))
        lm.encoder.requires_grad_(False)
        return lm

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, *, revision: str | None = None, **load) -> "TextFreeLM":
        """A run by local directory or Hugging Face hub id (``owner/name``, downloaded to the local cache, or read
        from it when ``HF_HUB_OFFLINE=1``); ``load`` goes to :meth:`load` (device, decoder, ...)."""
        run = resolve_pretrained(name_or_path, revision=revision, marker=CONFIG_NAME, what="PPFT run")
        return cls.load(run, **load)

    def save_pretrained(self, directory: str | os.PathLike, *, include_decoder: bool | None = None) -> Path:
        """A complete, portable run directory that :meth:`from_pretrained` loads: :meth:`save`'s files, with the base
        decoder copied into ``decoder/`` when it is a local directory (``include_decoder=False``: keep only its
        reference; a hub decoder is always referenced by id). Written beside ``directory`` and renamed into place;
        an earlier run there is replaced."""
        ref = dict(self.server.decoder_ref)

        def fill(tmp: Path) -> None:
            try:
                self.save(tmp)
            finally:
                self.server.decoder_ref = ref  # a trained base's ref points into tmp, which is renamed
            _bundle_decoder(tmp, include_decoder)

        return replace_dir(directory, fill, marker=CONFIG_NAME)

    def push_to_hub(self, repo_id: str, *, include_decoder: bool | None = None, **push) -> object:
        """Publish the run as the hub model repository ``repo_id`` (:meth:`save_pretrained` into a temporary
        directory, then ``HfApi().upload_folder``); ``push``: token, private, revision, commit_message."""
        return push_saved(lambda d: self.save_pretrained(d, include_decoder=include_decoder), repo_id, **push)

    def save(self, run_dir: str | os.PathLike) -> Path:
        """Write the full run layout; the config records the saved encoder's sha256."""
        run = Path(run_dir)
        enc_dir = run / ENCODER_DIR
        enc_dir.mkdir(parents=True, exist_ok=True)
        self.encoder.model.save_pretrained(str(enc_dir))
        self.encoder.tokenizer.save_pretrained(str(enc_dir))
        sha = weights_sha256(str(enc_dir))
        self.encoder.sha256 = sha
        self.server.config = self.server.config.replace(encoder_sha256=sha)
        if self.center is not None:
            save_center(run, self.center)
        self.server.save(run)
        return run

    # ------------------------------------------------------------------ client side
    def tokenize_private(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Encoder token ids of private texts (client side), cut at ``max_private_tokens``."""
        return self.encoder.tokenize(list(texts))

    def sends_whole(self, text: str) -> bool:
        """True when the client cuts nothing of ``text`` (it has at most ``max_private_tokens`` encoder tokens)."""
        limit = self.config.max_private_tokens
        return len(self.encoder.tokenizer(text, truncation=True, max_length=limit + 1)["input_ids"]) <= limit

    def encode_slots(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder -> k-pool -> L2 normalise, without noise and with gradients: (slots [B, S, d_e], mask [B, S])."""
        hidden = self.encoder(input_ids, attention_mask)
        pooled, slot_mask = k_pool(hidden.float(), attention_mask, self.config.k)
        return l2_normalize(pooled) * slot_mask.unsqueeze(-1), slot_mask

    def privatizer(
        self,
        epsilon: float | None,
        *,
        k: int | None = None,
        mechanism: str | None = None,
        match: str | None = None,
        fixed_slots: bool | None = None,
        **params,
    ) -> Privatizer:
        """The client as users run it: ``epsilon=None`` gives clean (non-private) payloads; with ``fixed_slots``
        (default: the model's) every payload has ``ceil(max_private_tokens / k)`` slots; a model with a slot centre
        centres every slot on it; a ``repeat_mean`` model's client repeats each prompt's unit mean slot.

        ``mechanism`` / ``match`` default to the model's (see :func:`make_noise`)."""
        noise = make_noise(
            mechanism or self.config.mechanism,
            epsilon,
            dim=self.encoder.dim,
            match=match or self.config.noise_match,
            **params,
        )
        config = self.config.replace(
            k=self.config.k if k is None else k,
            fixed_slots=self.config.fixed_slots if fixed_slots is None else fixed_slots,
        )
        return Privatizer(
            self.encoder, noise, config.k, pad_to=config.pad_to, center=self.center, repeat_mean=config.repeat_mean
        )

    # ------------------------------------------------------------------ whole pipeline
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        public: Sequence[str] | None = None,
        targets: Sequence[str] | None = None,
        all_logits: bool = False,
    ) -> ServerOutput:
        """Stage 1 (no noise): encoder ids -> slots -> server. Gradients reach the encoder."""
        vectors, mask = self.encode_slots(input_ids, attention_mask)
        return self.server(vectors, mask, public=public, targets=targets, all_logits=all_logits)

    def ask(
        self,
        private: str | Sequence[str],
        *,
        public: str | Sequence[str] | None = None,
        epsilon: float | None,
        k: int | None = None,
        seed: int | None = None,
        max_new_tokens: int = 32,
    ) -> list[str]:
        """Client privatizes ``private`` locally, the server answers from the payload (+ ``public``)."""
        texts = [private] if isinstance(private, str) else list(private)
        pub = None if public is None else ([public] if isinstance(public, str) else list(public))
        payload: Payload = self.privatizer(epsilon, k=k).privatize(texts, seed=seed, public=pub)
        return self.server.answer(payload, max_new_tokens=max_new_tokens)
