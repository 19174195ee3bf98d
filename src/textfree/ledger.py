"""A local privacy ledger: every release's privacy loss, per user or key, in a JSON file.

No reference system keeps one. The client charges the ledger *before* a payload leaves the process; past the
configured budget it warns or refuses. Losses compose by basic sequential composition (epsilons and deltas
add), which is what metric privacy and pure DP support without further assumptions.

The file is written atomically (temp file + rename) under an advisory lock, so a crash never leaves half a
ledger and two processes on one machine do not lose each other's entries.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .atomic import atomic_write_text
from .mechanisms.base import PrivacyLoss

__all__ = ["PrivacyLedger", "BudgetExceeded", "BudgetWarning", "LedgerError"]

LEDGER_FORMAT = "textfree.ledger"
LEDGER_VERSION = 1


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class BudgetExceeded(RuntimeError):
    """A release would take a key past its budget and the ledger is set to refuse."""


class BudgetWarning(UserWarning):
    """A release took a key past its budget and the ledger is set to warn."""


class LedgerError(ValueError):
    """The ledger file is unreadable or malformed."""


@dataclass
class PrivacyLedger:
    """``budget``: the largest total epsilon per key; ``delta_budget``: the largest total delta per key (approximate-DP
    releases such as the Gaussian's add their deltas); ``on_exceed``: 'refuse' (default) or 'warn'. ``path`` may
    start with ``~``."""

    path: Path
    budget: float | None = None
    on_exceed: str = "refuse"
    delta_budget: float | None = None

    def __post_init__(self) -> None:
        self.path = Path(self.path).expanduser()
        if self.budget is not None and not (_is_number(self.budget) and self.budget > 0):
            raise ValueError(f"PrivacyLedger: budget must be a number > 0 or None, got {self.budget!r}")
        if self.delta_budget is not None and not (_is_number(self.delta_budget) and 0 < self.delta_budget < 1):
            raise ValueError(
                f"PrivacyLedger: delta_budget must be a number in (0, 1) or None, got {self.delta_budget!r}"
            )
        if self.on_exceed not in ("refuse", "warn"):
            raise ValueError(f"PrivacyLedger: on_exceed must be 'refuse' or 'warn', got {self.on_exceed!r}")

    # ------------------------------------------------------------------ reading
    def entries(self, key: str | None = None) -> list[dict[str, Any]]:
        data = self._read()
        return [e for e in data["entries"] if key is None or e["key"] == key]

    def spent(self, key: str) -> PrivacyLoss:
        total = PrivacyLoss(0.0, 0.0, "metric")
        for e in self.entries(key):
            total = total + PrivacyLoss(e["epsilon"], e["delta"], e["notion"])
        return total

    def remaining(self, key: str) -> float | None:
        """The epsilon ``key`` may still spend (None without a budget)."""
        return None if self.budget is None else self.budget - self.spent(key).epsilon

    def remaining_delta(self, key: str) -> float | None:
        """The delta ``key`` may still spend (None without a delta budget)."""
        return None if self.delta_budget is None else self.delta_budget - self.spent(key).delta

    # ------------------------------------------------------------------ writing
    def charge(self, key: str, loss: PrivacyLoss, *, note: str = "", releases: int = 1) -> PrivacyLoss:
        """Record ``loss`` for ``key``, checking the budget first. Returns the new total for ``key``."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"ledger key must be a non-empty string, got {key!r}")
        with self._locked():
            data = self._read()
            spent = PrivacyLoss(0.0, 0.0, "metric")
            for e in data["entries"]:
                if e["key"] == key:
                    spent = spent + PrivacyLoss(e["epsilon"], e["delta"], e["notion"])
            total = spent + loss
            over = []
            if self.budget is not None and total.epsilon > self.budget:
                over.append(f"epsilon: spent {spent.epsilon:g}, this release {loss.epsilon:g}, budget {self.budget:g}")
            if self.delta_budget is not None and total.delta > self.delta_budget:
                over.append(f"delta: spent {spent.delta:g}, this release {loss.delta:g}, budget {self.delta_budget:g}")
            if over:
                msg = f"privacy budget exceeded for {key!r}: " + "; ".join(over)
                if self.on_exceed == "refuse":
                    raise BudgetExceeded(msg + " (release refused; nothing was sent)")
                warnings.warn(msg, BudgetWarning, stacklevel=2)
            data["entries"].append(
                {
                    "key": key,
                    "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "epsilon": loss.epsilon,
                    "delta": loss.delta,
                    "notion": loss.notion,
                    "releases": releases,
                    "note": note,
                }
            )
            self._write(data)
        return total

    # ------------------------------------------------------------------ file handling
    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {"format": LEDGER_FORMAT, "version": LEDGER_VERSION, "entries": []}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise LedgerError(f"cannot read privacy ledger {str(self.path)!r}: {exc}") from None
        if (
            not isinstance(data, dict)
            or data.get("format") != LEDGER_FORMAT
            or not isinstance(data.get("entries"), list)
        ):
            raise LedgerError(f"{str(self.path)!r} is not a textfree privacy ledger")
        for i, e in enumerate(data["entries"]):
            if not isinstance(e, dict) or not {"key", "epsilon", "delta", "notion"} <= set(e):
                raise LedgerError(f"{str(self.path)!r}: entry {i} is malformed")
            try:  # a hand-edited or damaged entry must not pass for a smaller spend
                PrivacyLoss(e["epsilon"], e["delta"], e["notion"])
            except (TypeError, ValueError) as exc:
                raise LedgerError(f"{str(self.path)!r}: entry {i} is malformed: {exc}") from None
        return data

    def _write(self, data: dict[str, Any]) -> None:
        atomic_write_text(self.path, json.dumps(data, indent=1))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        with open(lock, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
