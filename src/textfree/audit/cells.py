"""The cells an audit runs, built from its :class:`~textfree.audit.config.AuditConfig`: the same cell kinds as
``textfree run`` (``attribute_inference``; ``token_inversion`` where the release is per token), on the user's file
through its column mapping. Nothing here computes: the cells are data, the kinds do the work."""

from __future__ import annotations

from typing import Any

from .config import AuditConfig

__all__ = ["attribute_cell", "token_cell", "audit_cells"]

#: What the auditor grants the attacker: its own in-domain text with attributes, the mechanism and its parameters,
#: and the access the release needs to make training inputs (the encoder, or the embedding table).
_GRANTS = {
    "slots": {"encoder_queries": True, "training_text": "in_domain"},
    "tokens": {"embedding_table": True, "training_text": "in_domain"},
    "text": {"training_text": "in_domain"},
}


def _release(config: AuditConfig) -> str:
    return config.release if config.mechanism == "l2_laplace" else config.mechanism


def _grid_number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def attribute_cell(config: AuditConfig) -> dict[str, Any]:
    """The ``attribute_inference`` cell: every attacker, unaware and aware, chosen on the validation part, with the
    prior, clean-text, label and length references, over the epsilon grid."""
    release = _release(config)
    mapping = config.columns.to_dict()
    params: dict[str, Any] = {
        "release": release,
        "columns": {k: v for k, v in mapping["columns"].items() if k != "pii"},
        "attributes": mapping["attributes"],
        "test_share": config.test_share,
        "validation": config.validation,
        "epochs": config.epochs,
        "hidden": config.hidden,
        "attackers": list(config.attackers),
        "training": list(config.training),
        "curve": list(config.curve or ()),
        "train_limit": config.train_limit,
    }
    if config.threads is not None:
        params["threads"] = config.threads
    eps = [_grid_number(e) for e in config.epsilons]
    family = "text" if release in ("t2t", "pct2t") else release
    threat = dict(_GRANTS[family])
    if "aware" in config.training:
        threat |= {"knows_mechanism": True, "knows_parameters": True}
    cell: dict[str, Any] = {
        "name": "audit_attributes",
        "kind": "attribute_inference",
        "dataset": config.data,
        "split": config.split,
        "limit": config.limit,
        "encoder": config.encoder,
        "params": params,
        "attack": {"threat": threat},
        "seeds": list(config.seeds),
        "notes": "textfree audit: attribute inference on the user's file through its column mapping",
    }
    if family == "text":
        params |= {"k": config.k, "eta": eps[0]}
        if release == "pct2t":
            params["pos"] = "default"
        cell["grid"] = {"params.eta": eps}
    else:
        params |= {"k": config.k} if release == "slots" else {"max_tokens": config.max_tokens}
        cell["mechanism"] = {"name": "l2_laplace", "epsilon": eps[0]}
        cell["grid"] = {"mechanism.epsilon": eps}
    return cell


def token_cell(config: AuditConfig) -> dict[str, Any] | None:
    """The ``token_inversion`` cell where the release is per token (nearest neighbour in the embedding table, and the
    PII units found in its guesses when a PII column is mapped); None for pooled slots and text."""
    if _release(config) != "tokens":
        return None
    columns = config.columns.to_dict()["columns"]
    return {
        "name": "audit_tokens",
        "kind": "token_inversion",
        "dataset": config.data,
        "split": config.split,
        "limit": config.limit,
        "encoder": config.encoder,
        "mechanism": {"name": "l2_laplace", "epsilon": _grid_number(config.epsilons[0])},
        "grid": {"mechanism.epsilon": [_grid_number(e) for e in config.epsilons]},
        "params": {"max_tokens": config.max_tokens, "columns": columns}
        | ({"threads": config.threads} if config.threads else {}),
        "attack": {
            "threat": {"embedding_table": True, "training_text": "public"},
            "attacks": ["nn_l2", "nn_cosine"],
        },
        "seeds": list(config.seeds),
        "notes": "textfree audit: token-level inversion of the user's texts",
    }


def audit_cells(config: AuditConfig) -> list[dict[str, Any]]:
    """Every cell of the battery, in run order."""
    return [c for c in (attribute_cell(config), token_cell(config)) if c is not None]
