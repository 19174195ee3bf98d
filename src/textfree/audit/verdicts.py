"""The audit's reading of an ``attribute_inference`` result file: one :class:`Verdict` per (grid point, attribute),
the chosen attacker's score beside every reference, and the notes that keep a small sample honest (a noise-aware
attacker below the unaware one or below the prior, a clean text with no signal, a figure within noise of the prior).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Verdict", "verdicts", "UNIT_EPSILONS", "beside_points"]

#: The formal loss of one released unit, by release: the first that the result holds.
UNIT_EPSILONS = (("slot_epsilon", "slot"), ("token_epsilon", "token"), ("word_epsilon", "word"))


@dataclass
class Verdict:
    """One attribute at one grid point (means over seeds)."""

    attribute: str
    metric: str  # the score the attacker was chosen on: <attribute>_accuracy or <attribute>_f1
    x: float  # the grid value (epsilon, or T2T's eta)
    chosen: str  # the attacker chosen on the validation part (e.g. slots_aware, mean_unaware_e15)
    values: dict[str, float]  # best, best_val, prior, clean, label, length, excess
    n_test: int
    n_validation: int
    n_train: int
    guarantee: dict[str, float]
    attackers: dict[str, tuple[float, float]]  # attacker_training (full epochs) -> (evaluated, validation)
    curve: dict[str, list[tuple[int, float]]]  # attacker_training -> [(epochs, validation score)]
    notes: list[str] = field(default_factory=list)
    beside: dict[str, float] | None = None  # the same score of another result file at the same grid value

    @property
    def stderr(self) -> float:
        """The binomial standard error of the chosen attacker's evaluated score (an accuracy or a share)."""
        p = self.values["best"]
        return math.sqrt(max(p * (1 - p), 0.0) / self.n_test) if self.n_test and not math.isnan(p) else math.nan


def _mean(metrics: dict[str, Any], name: str) -> float:
    value = (metrics.get(name) or {}).get("mean")
    return math.nan if value is None else float(value)


def _candidates(params: dict[str, Any]) -> list[str]:
    """The kind's candidate order (:meth:`~textfree.experiments.kinds._attribute_params._Settings.candidates`)."""
    epochs = params.get("epochs", 150)
    curve = [*params.get("curve", []), epochs]
    return [
        f"{a}_{t}" + ("" if e == epochs else f"_e{e}")
        for a in params.get("attackers", ["mean", "slots"])
        for t in params.get("training", ["unaware", "aware"])
        for e in curve
    ]


def _attributes(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    """(attribute, the score it was chosen on), from the ``<attribute>_choice`` metrics."""
    out = []
    for name in metrics:
        if name.endswith("_choice"):
            attribute = name[: -len("_choice")]
            score = "accuracy" if f"{attribute}_accuracy_best" in metrics else "f1"
            out.append((attribute, f"{attribute}_{score}"))
    return out


def _notes(v: Verdict) -> list[str]:
    notes = []
    prior, best, clean, label = (v.values[k] for k in ("prior", "best", "clean", "label"))
    for name, (test, _) in v.attackers.items():
        if not name.endswith("_aware"):
            continue
        unaware = v.attackers.get(name.replace("_aware", "_unaware"))
        if unaware is not None and test < unaware[0]:
            notes.append(f"noise-aware {name} ({test:.3f}) scores below its noise-unaware twin ({unaware[0]:.3f})")
        if test < prior:
            notes.append(f"noise-aware {name} ({test:.3f}) scores below the prior ({prior:.3f})")
    se = v.stderr
    if not math.isnan(se) and best <= prior + se:
        notes.append(f"the chosen attacker is within one standard error ({se:.3f}) of the prior: no leak measured")
    if not math.isnan(clean) and not math.isnan(se) and clean <= prior + se:
        notes.append(
            "the clean text carries no signal a TF-IDF reader finds (clean-text reference at the prior): a figure at "
            "the prior here says nothing about the mechanism"
        )
    if not math.isnan(label) and label >= best:
        notes.append(f"the task's label alone reveals as much ({label:.3f})")
    return notes


def beside_points(result: dict[str, Any]) -> dict[float, dict[str, Any]]:
    """Grid value -> mean metrics of another attribute result file (its first grid axis)."""
    axes = result.get("grid_axes") or []
    out = {}
    for row in result["results"]:
        x = row["point"].get(axes[0]) if axes else None
        if x is None:
            mech = (row.get("resolved") or {}).get("mechanism") or {}
            x = mech.get("epsilon", (row.get("resolved") or {}).get("params", {}).get("eta"))
        if x is not None:
            out[float(x)] = {k: _mean(row["metrics"], k) for k in row["metrics"]}
    return out


def verdicts(result: dict[str, Any], beside: dict[str, Any] | None = None) -> list[Verdict]:
    """Every (grid point, attribute) of an attribute_inference result file, in grid order; with ``beside`` (another
    such file) its chosen attacker's score and prior at the same grid value."""
    params = result["cell"].get("params") or {}
    axes = result.get("grid_axes") or []
    candidates = _candidates(params)
    full = [f"{a}_{t}" for a in params.get("attackers", ["mean", "slots"]) for t in params.get("training", [])]
    other = beside_points(beside) if beside is not None else {}
    out = []
    for row in result["results"]:
        metrics = row["metrics"]
        x = float(row["point"][axes[0]]) if axes else math.nan
        guarantee = {
            k: _mean(metrics, k)
            for k in ("prompt_epsilon", "prompt_epsilon_max", *(u for u, _ in UNIT_EPSILONS))
            if k in metrics
        }
        for attribute, metric in _attributes(metrics):
            choice = _mean(metrics, f"{attribute}_choice")
            values = {
                k: _mean(metrics, f"{metric}_{k}")
                for k in ("best", "best_val", "prior", "clean", "label", "length", "excess")
            }
            attackers = {a: (_mean(metrics, f"{metric}_{a}"), _mean(metrics, f"{metric}_{a}_val")) for a in full}
            curve = {
                a: [(e, _mean(metrics, f"{metric}_{a}_val_e{e}")) for e in params.get("curve", [])]
                + [(params.get("epochs", 150), attackers[a][1])]
                for a in full
            }
            v = Verdict(
                attribute,
                metric,
                x,
                candidates[int(choice)] if not math.isnan(choice) and int(choice) < len(candidates) else "?",
                values,
                int(_mean(metrics, "n_test")),
                int(_mean(metrics, "n_validation")),
                int(_mean(metrics, "n_train")),
                guarantee,
                attackers,
                curve,
            )
            v.notes = _notes(v)
            there = other.get(x)
            if there is not None and f"{metric}_best" in there:
                v.beside = {k: there.get(f"{metric}_{k}", math.nan) for k in ("best", "prior", "label")} | {
                    "n_test": there.get("n_test", math.nan),
                    "n_train": there.get("n_train", math.nan),
                    "n_validation": there.get("n_validation", math.nan),
                    # files before the validation part chose their best attacker on the evaluated prompts
                    "chosen_on_validation": float(f"{attribute}_choice" in there),
                }
            out.append(v)
    return out
