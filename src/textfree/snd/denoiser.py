"""SnD's client-side denoiser (Mai et al. 2023, §3.4, Fig. 3, Table 8): a transformer over the server's noisy output
embedding, the client's privatized token embeddings and the noise it added, read out at the output's position.

The input sequence is ``H_0 = [e_n; x~_1 .. x~_n; z_1 .. z_n]`` (eq. 7): ``e_n`` the embedding the server returned,
``x~_t`` the clipped noisy token embeddings the client sent, ``z_t = x~_t - x_t`` the effective noise (after
clipping). Each block is eq. 8-9, ``h <- h + a + m`` with ``a = attn(LN(h))`` over every real position (padding
masked) and ``m = W_proj GELU(W_fc LN(a + h))``; attention has ``n_head`` heads of width ``d_kv`` (Table 8 sets it
apart from ``d_model``). The denoised embedding is the final state at ``e_n``'s position (eq. 10): ``e_d = h_0^L``;
a model narrower than the output reads e_n through a linear map and adds its correction to e_n (``e_d = e_n +
W h_0^L``), since a narrow bottleneck alone could not return e_n. ``x~_t`` and ``z_t`` carry a learned position
``t`` and a segment (output / token / noise); with ``eta_input`` the noise level ``log eta`` is an input too, so one
model serves a range of eta (the paper trains one model per group of two etas).

The ablations of the paper's A.12 are settings: ``use_noise=False`` (without Z: what a server-side denoiser could
run, it never sees Z) and ``use_tokens=False`` (without X~).

A denoiser is one safetensors file (``denoiser.safetensors``) whose metadata holds its config as JSON: one file, one
sha256, which a server publishes on its model card and a client checks before use. :meth:`Denoiser.from_bytes`
parses the header itself and refuses anything that is not exactly this model's tensors; nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from ..tensorfile import SafetensorsError, canonical_header, safetensors_metadata

__all__ = ["DENOISER_FILE", "MAX_DENOISER_BYTES", "DenoiserConfig", "Denoiser", "DenoiserError", "denoiser_sha256"]

DENOISER_FILE = "denoiser.safetensors"
#: The largest denoiser file a client accepts (a 6-layer 1024-wide model is ~150 MB in float32).
MAX_DENOISER_BYTES = 512 * 1024 * 1024
_FORMAT = "textfree.snd.denoiser"


class DenoiserError(ValueError):
    """A denoiser file or config that cannot be used (damaged, another format, wrong tensors, bad settings)."""


@dataclass(frozen=True)
class DenoiserConfig:
    """The denoiser's sizes, inputs and what it was trained for (saved in its file's metadata)."""

    token_dim: int = field(metadata={"help": "Width of the token embeddings x~ and noise z (the embedding table's)."})
    output_dim: int = field(metadata={"help": "Width of the server's output embedding e_n."})
    d_model: int = field(default=384, metadata={"help": "Hidden width (Table 8's d_model)."})
    d_ff: int = field(default=384, metadata={"help": "Feed-forward width (Table 8's d_ff)."})
    d_kv: int = field(default=240, metadata={"help": "Width of each attention head (Table 8's d_kv)."})
    n_head: int = field(default=6, metadata={"help": "Attention heads (Table 8's n_head)."})
    n_layers: int = field(default=3, metadata={"help": "Blocks (Table 8's L; DistilBERT's row: 3)."})
    dropout: float = field(default=0.0, metadata={"help": "Dropout in attention and feed-forward."})
    max_tokens: int = field(default=512, metadata={"help": "Longest token sequence (learned positions)."})
    use_tokens: bool = field(default=True, metadata={"help": "Read the privatized token embeddings X~ (ablation)."})
    use_noise: bool = field(default=True, metadata={"help": "Read the noise Z (False: a server-side denoiser)."})
    eta_input: bool = field(default=True, metadata={"help": "Read log(eta): one model for a range of eta."})
    eta_min: float | None = field(default=None, metadata={"help": "Smallest eta it was trained on (card)."})
    eta_max: float | None = field(default=None, metadata={"help": "Largest eta it was trained on (card)."})
    encoder_id: str | None = field(default=None, metadata={"help": "The served encoder it denoises (name)."})
    encoder_sha256: str | None = field(default=None, metadata={"help": "sha256 of that encoder's weights."})
    clip: bool = field(default=True, metadata={"help": "Trained on clipped noisy embeddings (SnD eq. 3)."})

    def __post_init__(self) -> None:
        for name in ("token_dim", "output_dim", "d_model", "d_ff", "d_kv", "n_head", "n_layers", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DenoiserError(f"denoiser {name} must be an integer >= 1, got {value!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise DenoiserError(f"denoiser dropout must be in [0, 1), got {self.dropout!r}")
        for name in ("use_tokens", "use_noise", "eta_input", "clip"):
            if not isinstance(getattr(self, name), bool):
                raise DenoiserError(f"denoiser {name} must be true or false, got {getattr(self, name)!r}")
        for name in ("eta_min", "eta_max"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise DenoiserError(f"denoiser {name} must be a number > 0 or null, got {value!r}")
        if self.eta_min is not None and self.eta_max is not None and self.eta_min > self.eta_max:
            raise DenoiserError(f"denoiser eta_min {self.eta_min} is above eta_max {self.eta_max}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> DenoiserConfig:
        if not isinstance(data, dict):
            raise DenoiserError(f"a denoiser config must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(data) - known):
            raise DenoiserError(f"unknown denoiser setting(s) {unknown}; known: {sorted(known)}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise DenoiserError(f"denoiser config: {exc}") from None

    def replace(self, **changes: Any) -> DenoiserConfig:
        return DenoiserConfig.from_dict(self.to_dict() | changes)


class _Block(torch.nn.Module):
    """One layer of eq. 8-9: ``h + attn(LN(h)) + MLP(LN(attn + h))``."""

    def __init__(self, cfg: DenoiserConfig):
        super().__init__()
        inner = cfg.n_head * cfg.d_kv
        self.n_head, self.d_kv = cfg.n_head, cfg.d_kv
        self.ln_attn = torch.nn.LayerNorm(cfg.d_model)
        self.qkv = torch.nn.Linear(cfg.d_model, 3 * inner)
        self.out = torch.nn.Linear(inner, cfg.d_model)
        self.ln_mlp = torch.nn.LayerNorm(cfg.d_model)
        self.fc = torch.nn.Linear(cfg.d_model, cfg.d_ff)
        self.proj = torch.nn.Linear(cfg.d_ff, cfg.d_model)
        self.drop = torch.nn.Dropout(cfg.dropout)

    def forward(self, h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, s, _ = h.shape
        q, k, v = self.qkv(self.ln_attn(h)).view(b, s, 3, self.n_head, self.d_kv).permute(2, 0, 3, 1, 4)
        mask = keep[:, None, None, :]  # [B, 1, 1, S]: attend to real positions only
        att = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.drop.p if self.training else 0.0
        )
        a = self.drop(self.out(att.transpose(1, 2).reshape(b, s, -1)))
        m = self.drop(self.proj(torch.nn.functional.gelu(self.fc(self.ln_mlp(a + h)))))
        return h + a + m


class Denoiser(torch.nn.Module):
    """``D(e_n, X~, Z) -> e_d`` (eq. 6); see the module docstring."""

    def __init__(self, config: DenoiserConfig):
        super().__init__()
        self.config = cfg = config
        same = cfg.output_dim == cfg.d_model
        self.read_output = torch.nn.Identity() if same else torch.nn.Linear(cfg.output_dim, cfg.d_model)
        self.write_output = torch.nn.Identity() if same else torch.nn.Linear(cfg.d_model, cfg.output_dim)
        self.read_tokens = torch.nn.Linear(cfg.token_dim, cfg.d_model)
        self.read_noise = torch.nn.Linear(cfg.token_dim, cfg.d_model)
        self.segment = torch.nn.Embedding(3, cfg.d_model)
        self.position = torch.nn.Embedding(cfg.max_tokens, cfg.d_model)
        self.read_eta = torch.nn.Linear(1, cfg.d_model)
        self.blocks = torch.nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layers))
        for p in (self.segment.weight, self.position.weight):
            torch.nn.init.normal_(p, std=0.02)
        # Start near the identity on e_n (where the widths agree): every block's residual branches and the eta input
        # begin at zero, so an untrained denoiser returns ~e_n (TokEmbPriv) and training learns the correction.
        # (A random read_eta added a vector of norm ~sqrt(d) * log10(eta) to the output at the start.)
        # A model narrower than the output adds its correction to e_n (write_output starts at zero): through a
        # d_model-wide bottleneck alone it could not even return e_n at low noise.
        zeroed = [self.read_eta] + [m for block in self.blocks for m in (block.out, block.proj)]
        for layer in zeroed + ([] if same else [self.write_output]):
            torch.nn.init.zeros_(layer.weight)
            torch.nn.init.zeros_(layer.bias)

    # ------------------------------------------------------------------ the model
    def forward(
        self,
        e_n: torch.Tensor,
        x_tilde: torch.Tensor,
        z: torch.Tensor,
        mask: torch.Tensor,
        eta: torch.Tensor | float | None = None,
    ) -> torch.Tensor:
        """``e_n`` [B, output_dim], ``x_tilde`` and ``z`` [B, n, token_dim], ``mask`` [B, n] (True: a real token),
        ``eta`` [B] or a number (needed with ``eta_input``) -> the denoised embedding [B, output_dim]."""
        cfg = self.config
        self._check_inputs(e_n, x_tilde, z, mask)
        b, n = mask.shape
        head = self.read_output(e_n.float()) + self.segment.weight[0]
        if cfg.eta_input:
            head = head + self.read_eta(_log_eta(eta, b, e_n.device))
        parts, keep = [head.unsqueeze(1)], [torch.ones(b, 1, dtype=torch.bool, device=mask.device)]
        pos = self.position.weight[:n]
        if cfg.use_tokens:
            parts.append(self.read_tokens(x_tilde.float()) + self.segment.weight[1] + pos)
            keep.append(mask)
        if cfg.use_noise:
            parts.append(self.read_noise(z.float()) + self.segment.weight[2] + pos)
            keep.append(mask)
        h, keep = torch.cat(parts, dim=1), torch.cat(keep, dim=1)
        for block in self.blocks:
            h = block(h, keep)
        out = self.write_output(h[:, 0])
        return out if cfg.output_dim == cfg.d_model else e_n.float() + out

    def _check_inputs(self, e_n, x_tilde, z, mask) -> None:
        cfg = self.config
        if e_n.dim() != 2 or e_n.shape[1] != cfg.output_dim:
            raise DenoiserError(f"e_n must be [B, {cfg.output_dim}], got {tuple(e_n.shape)}")
        b = e_n.shape[0]
        for name, t in (("x_tilde", x_tilde), ("z", z)):
            if t.dim() != 3 or t.shape[0] != b or t.shape[2] != cfg.token_dim:
                raise DenoiserError(f"{name} must be [{b}, n, {cfg.token_dim}], got {tuple(t.shape)}")
        if x_tilde.shape != z.shape or mask.shape != x_tilde.shape[:2] or mask.dtype != torch.bool:
            raise DenoiserError(
                f"x_tilde {tuple(x_tilde.shape)}, z {tuple(z.shape)} and a bool mask {tuple(mask.shape)} must agree"
            )
        if mask.shape[1] > cfg.max_tokens:
            raise DenoiserError(f"{mask.shape[1]} tokens; this denoiser reads at most {cfg.max_tokens}")

    @torch.no_grad()
    def denoise(self, e_n, x_tilde, z, mask, eta=None, *, batch_size: int = 64) -> torch.Tensor:
        """:meth:`forward` in eval mode, in batches, float32 on the CPU."""
        self.eval()
        out = [
            self(e_n[i : i + batch_size], x_tilde[i : i + batch_size], z[i : i + batch_size],
                 mask[i : i + batch_size], eta if not torch.is_tensor(eta) else eta[i : i + batch_size])
            for i in range(0, e_n.shape[0], batch_size)
        ]  # fmt: skip
        return torch.cat(out).float().cpu() if out else torch.zeros(0, self.config.output_dim)

    # ------------------------------------------------------------------ one file, one hash
    def to_bytes(self) -> bytes:
        """The denoiser as one safetensors file: its tensors and, in the metadata, its config. The same weights give
        the same bytes (:func:`~textfree.tensorfile.canonical_header`), so :attr:`sha256` is the saved file's."""
        from safetensors.torch import save

        tensors = {k: v.detach().contiguous().cpu().float() for k, v in self.state_dict().items()}
        data = save(tensors, {"format": _FORMAT, "config": json.dumps(self.config.to_dict(), sort_keys=True)})
        return canonical_header(data)

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write ``denoiser.safetensors`` into ``directory`` (atomically); returns its path."""
        from ..atomic import atomic_write_bytes

        return atomic_write_bytes(Path(directory) / DENOISER_FILE, self.to_bytes())

    def push_to_hub(self, repo_id: str, **push: Any) -> Any:
        """Publish ``denoiser.safetensors`` as the hub model repository ``repo_id`` (``HfApi().upload_folder`` of a
        temporary :meth:`save_pretrained` directory); ``push``: token, private, revision, commit_message."""
        from ..lm.hub import push_saved

        return push_saved(self.save_pretrained, repo_id, **push)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @classmethod
    def from_bytes(cls, data: bytes, *, expected_sha256: str | None = None) -> Denoiser:
        """A denoiser from the bytes of its file; :class:`DenoiserError` for anything else (a damaged file, another
        format, missing or extra tensors, wrong shapes, non-finite weights, a hash other than ``expected_sha256``)."""
        if not isinstance(data, (bytes, bytearray)):
            raise DenoiserError(f"a denoiser file must be bytes, got {type(data).__name__}")
        if len(data) > MAX_DENOISER_BYTES:
            raise DenoiserError(f"a denoiser file of {len(data)} bytes is over the {MAX_DENOISER_BYTES}-byte limit")
        if expected_sha256 is not None and (got := hashlib.sha256(data).hexdigest()) != expected_sha256:
            raise DenoiserError(f"the denoiser's sha256 is {got[:16]}..., not the expected {expected_sha256[:16]}...")
        config = DenoiserConfig.from_dict(_metadata_config(bytes(data)))
        from safetensors.torch import load

        try:
            tensors = load(bytes(data))
        except Exception as exc:  # noqa: BLE001 - any parse failure of a peer's file is a DenoiserError
            raise DenoiserError(f"the denoiser file's tensors cannot be read: {exc}") from None
        model = cls(config)
        expected = model.state_dict()
        if set(tensors) != set(expected):
            missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
            raise DenoiserError(f"the denoiser file's tensors do not match its config (missing {missing[:3]}, "
                                f"extra {extra[:3]})")  # fmt: skip
        for name, value in tensors.items():
            if value.shape != expected[name].shape or value.dtype != torch.float32:
                raise DenoiserError(f"denoiser tensor {name!r} is {value.dtype} {tuple(value.shape)}, "
                                    f"expected float32 {tuple(expected[name].shape)}")  # fmt: skip
            if not torch.isfinite(value).all():
                raise DenoiserError(f"denoiser tensor {name!r} holds NaN or infinite values")
        model.load_state_dict(tensors)
        return model.eval()

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike, *, expected_sha256: str | None = None, revision: str | None = None
    ) -> Denoiser:
        """A denoiser from its file, a directory holding ``denoiser.safetensors``, or a Hugging Face hub id
        (``owner/name``: a repository holding that file, downloaded to the local cache, or read from it offline)."""
        from ..lm.hub import is_hub_id, resolve_pretrained

        if is_hub_id(path):
            try:
                path = resolve_pretrained(path, revision=revision, marker=DENOISER_FILE, what="denoiser")
            except FileNotFoundError as exc:
                raise DenoiserError(str(exc)) from None
        path = Path(path)
        file = path / DENOISER_FILE if path.is_dir() else path
        if not file.is_file():
            raise DenoiserError(f"no denoiser at {str(path)!r} (expected {DENOISER_FILE} in it)")
        return cls.from_bytes(file.read_bytes(), expected_sha256=expected_sha256)


def denoiser_sha256(path: str | os.PathLike) -> str:
    """sha256 of a denoiser file (or of ``denoiser.safetensors`` in a directory): what a model card names."""
    path = Path(path)
    file = path / DENOISER_FILE if path.is_dir() else path
    return hashlib.sha256(file.read_bytes()).hexdigest()


def _metadata_config(data: bytes) -> dict[str, Any]:
    """The config in a denoiser file's header metadata, its framing checked before any tensor is loaded."""
    try:
        meta = safetensors_metadata(data)
    except SafetensorsError as exc:
        raise DenoiserError(f"the denoiser file's header cannot be read: {exc}") from None
    if meta.get("format") != _FORMAT:
        raise DenoiserError(f"not a denoiser file (format {meta.get('format')!r}, expected {_FORMAT!r})")
    try:
        return json.loads(meta["config"])
    except (KeyError, ValueError) as exc:
        raise DenoiserError(f"the denoiser file's header holds no readable config: {exc}") from None


def _log_eta(eta: torch.Tensor | float | None, b: int, device: torch.device) -> torch.Tensor:
    if eta is None:
        raise DenoiserError("this denoiser reads the noise level: pass eta")
    eta = torch.as_tensor(eta, dtype=torch.float32, device=device).reshape(-1)
    if eta.numel() == 1:
        eta = eta.expand(b)
    if eta.numel() != b or not bool((eta > 0).all()) or not bool(torch.isfinite(eta).all()):
        raise DenoiserError(f"eta must be one finite number > 0 or one per row ({b}), got {eta.tolist()[:4]}")
    return (torch.log(eta) / math.log(10.0)).unsqueeze(-1)  # log10 eta: 1 at eta 10, 3 at eta 1000
