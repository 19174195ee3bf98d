"""A local privacy ledger: every release's privacy loss, per user or key, in a JSON file.

No reference system keeps one. The client charges the ledger *before* a payload leaves the process; past the
configured budget it warns or refuses. Losses compose under the ledger's accountant
(:mod:`textfree.mechanisms.accountants`): by default ``"basic"``, sequential composition (epsilons and deltas add),
which is what metric privacy and pure DP support without further assumptions and what every entry's own
epsilon and delta record (the plain sum). ``"gdp"``, ``"pld"`` or ``"rdp"`` compose the Gaussian releases of a
key tightly instead (entries charged with their releases, :meth:`PrivacyLedger.charge_payload`) and state epsilon
at the plain sum's delta; every other release still adds. Each entry names the accountant that checked it and the
key's total under it after the release.

The file is written atomically (temp file + rename) under an advisory lock, so a crash never leaves half a
ledger and two processes on one machine do not lose each other's entries.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .atomic import atomic_write_text
from .mechanisms.accountants import DEFAULT_ACCOUNTANT, Release, create_accountant, slot_releases
from .mechanisms.base import PrivacyLoss

__all__ = ["PrivacyLedger", "BudgetExceeded", "BudgetWarning", "LedgerError"]

LEDGER_FORMAT = "textfree.ledger"
LEDGER_VERSION = 1


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _added(total: float, before: float) -> float:
    """What a release added to a total under a tight accountant (infinite once the total before it was)."""
    return total - before if math.isfinite(before) else total


def _check_events(events: list[Release], loss: PrivacyLoss) -> None:
    """The releases of an entry must add up (basic composition) to the entry's own loss."""
    if not all(isinstance(r, Release) for r in events):
        raise ValueError("events must be Release objects (textfree.mechanisms.accountants.Release)")
    plain = PrivacyLoss(0.0, 0.0, loss.notion)
    for release in events:
        plain = plain + release.total()
    if not (_close(plain.epsilon, loss.epsilon) and _close(plain.delta, loss.delta)):
        raise ValueError(
            f"the events add up to epsilon {plain.epsilon:g}, delta {plain.delta:g}, not to the loss charged "
            f"(epsilon {loss.epsilon:g}, delta {loss.delta:g})"
        )


class BudgetExceeded(RuntimeError):
    """A release would take a key past its budget and the ledger is set to refuse."""


class BudgetWarning(UserWarning):
    """A release took a key past its budget and the ledger is set to warn."""


class LedgerError(ValueError):
    """The ledger file is unreadable or malformed."""


@dataclass
class PrivacyLedger:
    """``budget``: the largest total epsilon per key; ``delta_budget``: the largest total delta per key (approximate-DP
    releases such as the Gaussian's add their deltas); ``on_exceed``: 'refuse' (default) or 'warn'; ``accountant``:
    how a key's releases compose (:func:`~textfree.mechanisms.accountants.available_accountants`; default
    ``"basic"``, the plain sum). ``path`` may start with ``~``."""

    path: Path
    budget: float | None = None
    on_exceed: str = "refuse"
    delta_budget: float | None = None
    accountant: str = DEFAULT_ACCOUNTANT

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
        create_accountant(self.accountant)  # an unknown name, or a missing package, fails here, before any release

    # ------------------------------------------------------------------ reading
    def entries(self, key: str | None = None) -> list[dict[str, Any]]:
        data = self._read()
        return [e for e in data["entries"] if key is None or e["key"] == key]

    def spent(self, key: str, *, accountant: str | None = None, delta: float | None = None) -> PrivacyLoss:
        """What ``key`` has spent under ``accountant`` (default: the ledger's), at ``delta`` (default: the plain sum's
        delta). ``accountant="basic"``: the plain sum of the entries' own losses."""
        return self._total(self.entries(key), accountant or self.accountant, delta)

    def describe_accountant(self) -> str:
        """One line naming the ledger's accountant and what it does."""
        return create_accountant(self.accountant).describe()

    def _total(self, entries: list[dict[str, Any]], accountant: str, delta: float | None = None) -> PrivacyLoss:
        if accountant == "basic" and delta is None:  # exactly the sum the ledger has always kept
            total = PrivacyLoss(0.0, 0.0, "metric")
            for e in entries:
                total = total + PrivacyLoss(e["epsilon"], e["delta"], e["notion"])
            return total
        acc = create_accountant(accountant)
        for e in entries:
            if "events" in e and accountant != "basic":
                acc.extend(Release.from_dict(r) for r in e["events"])
            else:  # the entry's own loss, added as it stands
                acc.add(Release(PrivacyLoss(e["epsilon"], e["delta"], e["notion"])))
        return acc.spent(delta)

    def remaining(self, key: str) -> float | None:
        """The epsilon ``key`` may still spend (None without a budget)."""
        return None if self.budget is None else self.budget - self.spent(key).epsilon

    def remaining_delta(self, key: str) -> float | None:
        """The delta ``key`` may still spend (None without a delta budget)."""
        return None if self.delta_budget is None else self.delta_budget - self.spent(key).delta

    # ------------------------------------------------------------------ writing
    def charge(
        self,
        key: str,
        loss: PrivacyLoss,
        *,
        note: str = "",
        releases: int = 1,
        events: list[Release] | None = None,
    ) -> PrivacyLoss:
        """Record ``loss`` for ``key``, checking the budget first. Returns the new total for ``key`` under the
        ledger's accountant. ``events``: the releases ``loss`` is the plain sum of (their basic composition must
        equal it), kept in the entry so that a tight accountant can compose Gaussian releases exactly; without
        them the entry counts by its plain loss under every accountant."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"ledger key must be a non-empty string, got {key!r}")
        if events is not None:
            events = list(events)
            _check_events(events, loss)
        entry: dict[str, Any] = {
            "key": key,
            "time": "",
            "epsilon": loss.epsilon,
            "delta": loss.delta,
            "notion": loss.notion,
            "releases": releases,
            "note": note,
        }
        if events is not None:
            entry["events"] = [r.to_dict() for r in events]
        with self._locked():
            data = self._read()
            mine = [e for e in data["entries"] if e["key"] == key]
            spent = self._total(mine, self.accountant)
            total = self._total(mine + [entry], self.accountant)
            over = []
            basic = self.accountant == "basic"
            named = "" if basic else f" (accountant {self.accountant})"
            # what this release adds: its own loss under basic composition, the change of the total otherwise
            this_eps = loss.epsilon if basic else _added(total.epsilon, spent.epsilon)
            this_delta = loss.delta if basic else _added(total.delta, spent.delta)
            if self.budget is not None and total.epsilon > self.budget:
                over.append(
                    f"epsilon: spent {spent.epsilon:g}, this release {this_eps:g}, budget {self.budget:g}{named}"
                )
            if self.delta_budget is not None and total.delta > self.delta_budget:
                over.append(
                    f"delta: spent {spent.delta:g}, this release {this_delta:g}, budget {self.delta_budget:g}{named}"
                )
            if over:
                msg = f"privacy budget exceeded for {key!r}: " + "; ".join(over)
                if self.on_exceed == "refuse":
                    raise BudgetExceeded(msg + " (release refused; nothing was sent)")
                warnings.warn(msg, BudgetWarning, stacklevel=2)
            entry["time"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            # which accountant checked this release, and the key's total under it afterwards
            entry["accountant"] = self.accountant
            entry["total"] = {"epsilon": total.epsilon, "delta": total.delta}
            data["entries"].append(entry)
            self._write(data)
        return total

    def charge_payload(self, key: str, payload: Any, *, note: str | None = None) -> PrivacyLoss:
        """Charge a payload's release (every row's worst-case loss, as :class:`~textfree.privatizer.Privatizer`
        charges it) with its slot releases as ``events``, so that a tight accountant sees its Gaussian releases."""
        total = PrivacyLoss(0.0, 0.0, "metric")
        for loss in payload.row_losses():
            total = total + loss
        return self.charge(
            key,
            total,
            note=f"{payload.batch_size} prompt(s)" if note is None else note,
            releases=payload.batch_size,
            events=slot_releases(payload.privatization, payload.lengths),
        )

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
                loss = PrivacyLoss(e["epsilon"], e["delta"], e["notion"])
                if "events" in e:
                    if not isinstance(e["events"], list):
                        raise ValueError(f"events must be a list, got {type(e['events']).__name__}")
                    _check_events([Release.from_dict(r) for r in e["events"]], loss)
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
