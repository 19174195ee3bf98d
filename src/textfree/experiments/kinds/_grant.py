"""Checks shared by the attack kinds whose ``attack`` section is only a grant (``{threat: {...}}``)."""

from __future__ import annotations

from typing import Any

from ...attacks.threat import ThreatModel, ThreatModelError, check_grant
from ...data.registry import is_ppft_dataset
from ...results.cell import CellError

__all__ = ["granted_threat", "require_ppft_dataset"]


def granted_threat(attack: dict | None, kind: str, name: str, needs: ThreatModel, hint: str = "") -> ThreatModel:
    """The cell's grant, checked against ``needs`` (attack ``name``); a :class:`CellError` names the field and what is
    missing (``hint`` is appended to that message)."""
    attack = attack or {}
    if set(attack) - {"threat"}:
        raise CellError(f"the attack section of {kind} takes only `threat`, got {sorted(attack)}", field="attack")
    try:
        threat = ThreatModel.from_dict(attack.get("threat", {}))
    except (ThreatModelError, TypeError, ValueError) as exc:
        raise CellError(str(exc), field="attack.threat") from None
    try:
        check_grant(name, needs, threat)
    except ThreatModelError as exc:
        raise CellError(f"{exc}{hint}", field="attack.threat") from None
    return threat


def require_ppft_dataset(cell: Any, kind: str, why: str = "") -> None:
    """A Pri-* dataset (its PPFT split gives the attacker's text and the evaluated prompts), no `mechanism` section."""
    if cell.dataset is None or not is_ppft_dataset(cell.dataset):
        raise CellError(f"{kind} needs a Pri-* dataset{why}, got {cell.dataset!r}", field="dataset")
