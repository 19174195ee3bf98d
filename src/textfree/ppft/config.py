"""The configuration a PPFT model carries with it (``textfree_config.json``): dims, pooling, mechanism family,
the prompt template that lays out [BOS] [slots] [public] [answer] [EOS], and the LoRA settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..lm.adapters import AdapterSettings

__all__ = ["PromptTemplate", "TextFreeConfig", "CONFIG_FORMAT", "CONFIG_VERSION", "check_center_mu"]

CONFIG_FORMAT = "textfree.ppft"
CONFIG_VERSION = 1


def check_center_mu(name: str, value: Any) -> None:
    """The centring client's mu (mu-GDP of the centre's release): a number > 0, or None for no centring."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise ValueError(f"{name} must be a number > 0 or null, got {value!r}")


def _from_dict(cls, data: Any, what: str):
    known = {f.name for f in fields(cls)}
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a mapping, got {type(data).__name__}")
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown {what} field(s) {sorted(unknown)}; known: {sorted(known)}")
    return cls(**data)


@dataclass(frozen=True)
class PromptTemplate:
    """How the server lays out one sequence: ``[BOS] [slots] [public + public_suffix] [target_prefix + answer] [EOS]``.

    Public text and targets are tokenised separately (``add_special_tokens=False``) and concatenated as ids, the
    same way in training and in generation.
    """

    add_bos: bool = field(
        default=True, metadata={"help": "Start every sequence with the decoder's BOS token (when it has one)."}
    )
    public_suffix: str = field(
        default="\nAnswer:",
        metadata={"help": "Appended after the public text (also when there is none): the cue to answer."},
    )
    target_prefix: str = field(
        default=" ",
        metadata={"help": "Prepended to each target before tokenising (a leading space suits BPE tokenizers)."},
    )
    max_public_tokens: int = field(
        default=256, metadata={"help": "Public text is cut to this many tokens (the suffix is kept)."}
    )
    max_target_tokens: int = field(
        default=64,
        metadata={"help": "Targets are cut to this many tokens; a cut target gets no EOS (its answer did not end)."},
    )

    def __post_init__(self) -> None:
        for name in ("max_public_tokens", "max_target_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"PromptTemplate.{name} must be an integer >= 1, got {v!r}")

    @classmethod
    def from_dict(cls, data: Any) -> "PromptTemplate":
        return _from_dict(cls, data, "prompt template")


@dataclass(frozen=True)
class TextFreeConfig:
    """Everything about a PPFT model that is not a weight (saved as ``textfree_config.json``)."""

    encoder_id: str = field(
        metadata={"help": "Id of the client encoder (the base model's hub id or path); weights are in encoder/."}
    )
    encoder_sha256: str | None = field(
        metadata={"help": "sha256 of encoder/model.safetensors; the server rejects payloads made by another encoder."}
    )
    encoder_dim: int = field(metadata={"help": "d_e: width of the client's slots."})
    decoder_dim: int = field(metadata={"help": "d_d: width of the decoder's input embeddings."})
    k: int = field(default=4, metadata={"help": "Pool blocks of k encoder tokens into one slot."})
    mechanism: str = field(
        default="l2_laplace",
        metadata={"help": "Noise family the server part is adapted to (registered mechanism name)."},
    )
    epsilon: float | None = field(
        default=None,
        metadata={"help": "The mechanism's epsilon in the last noisy training stage; null = trained without noise."},
    )
    noise_match: str = field(
        default="budget",
        metadata={
            "help": "For mechanism 'gaussian': how epsilon maps to sigma, 'budget' (same per-slot guarantee as "
            "L2-Laplace) or 'norm' (same expected noise norm d/epsilon)."
        },
    )
    max_private_tokens: int = field(
        default=256,
        metadata={
            "help": "The client cuts private text to this many encoder tokens (k-pooled into at most ceil(n/k) slots)."
        },
    )
    template: PromptTemplate = field(
        default_factory=PromptTemplate, metadata={"help": "Sequence layout (see PromptTemplate)."}
    )
    lora: AdapterSettings = field(default_factory=AdapterSettings, metadata={"help": "LoRA settings of the adapter."})
    stage: str = field(
        default="init", metadata={"help": "'init' (untrained), 'stage1' (aligned) or 'stage2' (domain-adapted)."}
    )
    summary_slots: int = field(
        default=0,
        metadata={
            "help": "The server puts this many summary vectors before a payload's slots: the unit-normalised means of "
            "the row's slots cut into this many contiguous groups, through the same P_psi (0: none, as "
            "PPFT). Post-processing of the payload on the server: the client and its guarantee are unchanged."
        },
    )
    summary_only: bool = field(
        default=False,
        metadata={
            "help": "Beyond the paper, with summary_slots >= 1: the server hands the decoder the summary vectors in "
            "place of the payload's slots (the slots themselves are not laid out). For a repeat_mean client, "
            "whose slots are noisy copies of one vector, their mean carries what they carry. Post-processing "
            "on the server: the client and its guarantee are unchanged. false: the slots follow the summary "
            "vectors."
        },
    )
    fixed_slots: bool = field(
        default=False,
        metadata={
            "help": "The client pads every payload to ceil(max_private_tokens / k) slots (public filler slots after "
            "the prompt's own, noised like them), so the server does not learn the prompt's length; false: "
            "ceil(tokens / k) slots, as PPFT."
        },
    )

    center_mu: float | None = field(
        default=None,
        metadata={
            "help": "Beyond the paper: the client centres every unit slot on a public centre (the domain's mean slot, "
            "estimated from the stage-2 training prompts with mu-GDP Gaussian noise at this mu) and "
            "renormalises it before the noise (textfree.mechanisms.centering); null: no centring, as PPFT. "
            "The per-slot guarantee is unchanged."
        },
    )
    center_sha256: str | None = field(
        default=None,
        metadata={"help": "sha256 of the centre in slot_center.safetensors (set by training; null: no centring)."},
    )
    repeat_mean: bool = field(
        default=False,
        metadata={
            "help": "Beyond the paper: the client replaces every slot of a prompt by the prompt's unit mean slot "
            "(after centring and the subspace, before the noise), so the payload is s noisy copies of one "
            "unit vector (textfree.mechanisms.slots.repeat_mean_slots). Every slot stays a unit vector: the "
            "per-slot and per-prompt guarantees are PPFT's. The slots' order and wording are lost: for "
            "answers from a closed set. false: as PPFT."
        },
    )

    @property
    def pad_to(self) -> int | None:
        """The slots every payload has with ``fixed_slots`` (None: ceil(tokens / k) per prompt)."""
        return -(-self.max_private_tokens // self.k) if self.fixed_slots else None

    def __post_init__(self) -> None:
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ValueError(f"TextFreeConfig.k must be an integer >= 1, got {self.k!r}")
        for name in ("fixed_slots", "repeat_mean", "summary_only"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"TextFreeConfig.{name} must be true or false, got {getattr(self, name)!r}")
        if self.noise_match not in ("budget", "norm"):
            raise ValueError(f"TextFreeConfig.noise_match must be 'budget' or 'norm', got {self.noise_match!r}")
        if not isinstance(self.summary_slots, int) or isinstance(self.summary_slots, bool) or self.summary_slots < 0:
            raise ValueError(f"TextFreeConfig.summary_slots must be an integer >= 0, got {self.summary_slots!r}")
        if self.summary_only and not self.summary_slots:
            raise ValueError(
                "TextFreeConfig.summary_only needs summary_slots >= 1 (it lays out the summary vectors in place of the "
                "slots), got summary_slots 0"
            )
        check_center_mu("TextFreeConfig.center_mu", self.center_mu)
        if self.stage not in ("init", "stage1", "stage2"):
            raise ValueError(f"TextFreeConfig.stage must be init, stage1 or stage2, got {self.stage!r}")

    def replace(self, **changes: Any) -> "TextFreeConfig":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {"format": CONFIG_FORMAT, "format_version": CONFIG_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any) -> "TextFreeConfig":
        if not isinstance(data, dict):
            raise ValueError(f"textfree_config.json must hold a mapping, got {type(data).__name__}")
        data = dict(data)
        fmt, version = data.pop("format", None), data.pop("format_version", None)
        if fmt != CONFIG_FORMAT or version != CONFIG_VERSION:
            raise ValueError(f"not a {CONFIG_FORMAT} v{CONFIG_VERSION} config (format={fmt!r}, version={version!r})")
        data["template"] = PromptTemplate.from_dict(data.get("template", {}))
        data["lora"] = AdapterSettings.from_dict(data.get("lora", {}))
        return _from_dict(cls, data, "textfree config")
