"""``docs/results/snd.md``: Split-N-Denoise's results, generated from result files (never written by hand).

Inputs (files, or directories searched for ``*.json`` directly inside them):

* result files of the ``snd_downstream`` cell kind (:mod:`textfree.experiments.kinds.snd`): one cell per task and
  pipeline, a grid over ``params.eta``; the clean pipeline is the eta = infinity column;
* optionally result files of the ``token_inversion`` kind whose mechanism is ``clipped`` (SnD's payload, X~);
* optionally the JSON of ``benchmarks/bench_snd_client_cost.py`` (format :data:`COST_FORMAT`): the client's cost.

Every figure of ours comes from those files; the paper's numbers (Mai et al. 2023, "Split-and-Denoise") are the
constants below, each cited by its table. When several files hold the same cell (same name), the newest one wins.

Denoisers: a cell names its denoiser run (``params.denoiser``; the run's sha256 is in the row's provenance). The
report tells the *full* denoiser from the *small* one (the cheap variant the issue asks about) and from the
*in-domain* one (the full size, its corpus with QQP's training-part questions added: ``--sources ...,qqp_train``) by
``roles`` (a mapping from a denoiser path, its file name or its sha256, or a prefix of the sha256, to one of
:data:`DENOISER_ROLES`), else by name: a path containing ``small`` is the small one, one containing ``qqp`` the
in-domain one, any other the full one.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..atomic import atomic_save_figure, atomic_write_text

__all__ = [
    "KIND",
    "COST_FORMAT",
    "DENOISER_ROLES",
    "PAPER_ACC",
    "PAPER_AUC",
    "PAPER_SIM",
    "PAPER_COST",
    "PAPER_AVG_ACC_LOSS",
    "PAPER_ACC_ETAS",
    "ASSUMED_BERT_MEAN_TOKEN_NORM",
    "SndRow",
    "SndResults",
    "Target",
    "collect",
    "summary_targets",
    "build_report",
    "write_report",
]

KIND = "snd_downstream"
UPDATE_KIND = "snd_model_update"
#: The ``format`` of the client-cost benchmark's JSON (benchmarks/bench_snd_client_cost.py).
COST_FORMAT = "textfree.snd.client_cost"
INF = math.inf

# ---------------------------------------------------------------------------------------------- the paper's numbers
#: Table 1 (BERT family, ACC of SnD; eta = inf is the clean model): model -> task -> eta -> ACC.
PAPER_ACC: dict[str, dict[str, dict[float, float]]] = {
    "DistilBERT": {
        "cola": {100: 0.693, 500: 0.694, INF: 0.701},
        "qqp": {100: 0.632, 500: 0.649, INF: 0.683},
        "mrpc": {100: 0.683, 500: 0.691, INF: 0.695},
        "rte": {100: 0.578, 500: 0.580, INF: 0.592},
    },
    "BERT-base": {
        "cola": {100: 0.688, 500: 0.694, INF: 0.751},
        "qqp": {100: 0.667, 500: 0.688, INF: 0.728},
        "mrpc": {100: 0.689, 500: 0.725, INF: 0.742},
        "rte": {100: 0.592, 500: 0.610, INF: 0.616},
    },
}
#: The etas of Table 1 for BERT models (besides infinity): the ACC-loss target is averaged over these.
PAPER_ACC_ETAS = (100.0, 500.0)
#: A clean probe's AUC below this reads as chance: its task's ACC loss measures little.
CHANCE_AUC = 0.55

#: Section 4.4.2: BERT models' average relative ACC loss over the chosen etas and the four tasks.
PAPER_AVG_ACC_LOSS = 0.0431
#: Table 5 (AUC on QQP, BERT family): model -> pipeline -> eta -> AUC.
PAPER_AUC: dict[str, dict[str, dict[float, float]]] = {
    "DistilBERT": {
        "tokembpriv": {50: 0.502, 100: 0.518, 500: 0.521},
        "text2text": {50: 0.541, 100: 0.541, 500: 0.541},
        "rapt": {50: 0.517, 100: 0.515, 500: 0.545},
        "snd": {50: 0.583, 100: 0.600, 500: 0.610},
    },
    "BERT-base": {
        "tokembpriv": {50: 0.511, 100: 0.535, 500: 0.557},
        "text2text": {50: 0.512, 100: 0.513, 500: 0.513},
        "rapt": {50: 0.513, 100: 0.528, 500: 0.551},
        "snd": {50: 0.674, 100: 0.675, 500: 0.691},
    },
}
#: Table 11 (MSE and COS to the clean embedding on QQP, BERT family): model -> pipeline -> metric -> eta -> value.
PAPER_SIM: dict[str, dict[str, dict[str, dict[float, float]]]] = {
    "DistilBERT": {
        "tokembpriv": {"mse": {50: 0.507, 100: 0.507, 500: 0.630}, "cos": {50: 0.212, 100: 0.214, 500: 0.204}},
        "text2text": {"mse": {50: 0.445, 100: 0.445, 500: 0.445}, "cos": {50: 0.279, 100: 0.279, 500: 0.279}},
        "snd": {"mse": {50: 0.241, 100: 0.260, 500: 0.098}, "cos": {50: 0.511, 100: 0.490, 500: 0.846}},
    },
    "BERT-base": {
        "tokembpriv": {"mse": {50: 0.477, 100: 0.475, 500: 0.461}, "cos": {50: 0.097, 100: 0.098, 500: 0.105}},
        "text2text": {"mse": {50: 0.248, 100: 0.248, 500: 0.248}, "cos": {50: 0.470, 100: 0.470, 500: 0.470}},
        "snd": {"mse": {50: 0.060, 100: 0.075, 500: 0.035}, "cos": {50: 0.870, 100: 0.862, 500: 0.935}},
    },
}
#: Table 10 (A.8): MRPC AUC at eta 100 of BERT-base, denoiser fine-tuning samples -> base-model samples -> AUC.
PAPER_UPDATE_AUC = {
    0: {1000: 0.621, 10000: 0.612, 30000: 0.589, 60000: 0.575},
    100: {1000: 0.629, 10000: 0.627, 30000: 0.592, 60000: 0.614},
    1000: {1000: 0.642, 10000: 0.635, 30000: 0.644, 60000: 0.631},
}
#: Table 14 (A.11): SnD's client computation per sample (s, 128 tokens, their GPU server) and communication (MB).
PAPER_COST = {"DistilBERT": {"comp_s": 0.026, "comm_mb": 0.00014}, "BERT-base": {"comp_s": 0.031, "comm_mb": 0.00014}}
#: The paper's models' token-embedding width (DistilBERT and BERT-base: 768).
PAPER_DIM = 768
#: An ASSUMPTION, not a measurement: the mean L2 norm of a BERT-family input token embedding. This project holds no
#: BERT weights; the paper's noise-to-signal needs BERT's real mean norm, and this value (about 0.05 per coordinate
#: times sqrt(768)) only puts the paper's d / eta on a comparable scale.
ASSUMED_BERT_MEAN_TOKEN_NORM = 1.4
#: The width of the cells' encoder ``default`` (all-MiniLM-L6-v2).
OUR_DEFAULT_DIM = 384

TASK_ORDER = ("cola", "sst2", "mrpc", "rte", "qqp")
TASK_TITLES = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "rte": "RTE", "qqp": "QQP"}
#: Pipeline (and denoiser role) -> row title, in table order.
ROW_TITLES = {
    ("clean", None): "clean (eta = inf)",
    ("tokembpriv", None): "TokEmbPriv (clipped)",
    ("text2text", None): "Text2Text",
    ("pct2t", None): "PCT2T text (RAPT's privatization)",
    ("server_denoiser", "full"): "server-side denoiser (no Z)",
    ("server_denoiser", "small"): "server-side denoiser (no Z), small",
    ("snd", "full"): "SnD",
    ("snd", "small"): "SnD, small denoiser",
    ("snd", "in_domain"): "SnD, denoiser with QQP training questions in its corpus",
    ("no_clip", "full"): "ablation: no clipping",
    ("snd_no_noise", "full"): "ablation: without Z",
    ("snd_no_tokens", "full"): "ablation: without X~",
}
PAPER_TITLES = {"tokembpriv": "TokEmbPriv", "text2text": "Text2Text", "rapt": "RAPT", "snd": "SnD"}
_BASELINES = ("tokembpriv", "text2text", "server_denoiser")
#: The denoiser roles a report tells apart (see the module docstring).
DENOISER_ROLES = ("full", "small", "in_domain")
_ROLE_NOTES = {"in_domain": ", denoiser with QQP training questions"}
AUC_GAIN = 0.10
SMALL_COST_MAX = 0.25
SMALL_GAIN_MIN = 0.90
_MI_CAVEAT = (
    "The Kozachenko-Leonenko estimate of I(X; X + Z) (A.6, k = 1) in d = 384 from ~2,000 samples is biased (the "
    "k-NN distances of so few points in so many dimensions are far from their limit): compare etas with each other "
    "only, not with the paper's figures or with 0."
)
_DENOISER_SENTENCE = (
    "The denoiser adds nothing for the server: it never sees Z, and the denoiser's weights are public and trained on "
    "public text only."
)


# ---------------------------------------------------------------------------------------------------- collecting
@dataclass
class SndRow:
    """One grid point of one snd_downstream cell: its task, pipeline, denoiser, eta and metrics (mean, stderr)."""

    cell: str
    task: str
    pipeline: str
    eta: float
    denoiser: str | None
    denoiser_sha256: str | None
    role: str | None
    metrics: dict[str, dict[str, Any]]

    def mean(self, name: str) -> float:
        agg = self.metrics.get(name) or {}
        value = agg.get("mean")
        return math.nan if value is None else float(value)

    def stderr(self, name: str) -> float:
        agg = self.metrics.get(name) or {}
        value = agg.get("stderr")
        return math.nan if value is None else float(value)


@dataclass
class SourceFile:
    """A file the report read: its name, cell, kind and date."""

    path: Path
    cell: str
    kind: str
    date: str
    git: str | None
    seeds: list[int] = field(default_factory=list)


@dataclass
class SndResults:
    """Everything the report reads: snd_downstream rows, clipped token-inversion curves, the cost benchmark."""

    rows: list[SndRow]
    attacks: list[Any]
    cost: dict[str, Any] | None
    files: list[SourceFile]
    encoders: set[str] = field(default_factory=set)
    updates: list[dict[str, Any]] = field(default_factory=list)  # snd_model_update points: params and metric means

    def find(self, task: str, pipeline: str, eta: float, role: str | None = "auto") -> SndRow | None:
        """The row of ``task``/``pipeline`` at ``eta`` (the clean row for ``eta`` inf); ``role`` "auto": the full
        denoiser's row where the pipeline runs one."""
        if role == "auto":
            role = _default_role(pipeline)
        for row in self.rows:
            if row.task == task and row.pipeline == pipeline and row.role == role and _same(row.eta, eta):
                return row
        return None

    def value(self, task: str, pipeline: str, eta: float, metric: str, role: str | None = "auto") -> float:
        row = self.find(task, pipeline, eta, role)
        return math.nan if row is None else row.mean(metric)

    def tasks(self) -> list[str]:
        present = {r.task for r in self.rows}
        return [t for t in TASK_ORDER if t in present] + sorted(present - set(TASK_ORDER))

    def etas(self, task: str | None = None) -> list[float]:
        return sorted({r.eta for r in self.rows if r.eta != INF and (task is None or r.task == task)})

    def row_keys(self, task: str) -> list[tuple[str, str | None]]:
        present = {(r.pipeline, r.role) for r in self.rows if r.task == task}
        return [k for k in ROW_TITLES if k in present] + sorted(present - set(ROW_TITLES), key=str)


def _default_role(pipeline: str) -> str | None:
    from .evaluate import DENOISING_PIPELINES

    return "full" if pipeline in DENOISING_PIPELINES else None


def _same(a: float, b: float) -> bool:
    return a == b or (math.isfinite(a) and math.isfinite(b) and math.isclose(a, b, rel_tol=1e-9))


def _json_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.json")) if p.is_dir() else [p]
    return files


def _role(path: str | None, sha: str | None, roles: Mapping[str, str] | None) -> str | None:
    """One of :data:`DENOISER_ROLES` for a denoiser named by ``path`` / ``sha`` (see the module docstring)."""
    if path is None and sha is None:
        return None
    for key, role in (roles or {}).items():
        if role not in DENOISER_ROLES:
            raise ValueError(f"a denoiser role must be one of {', '.join(DENOISER_ROLES)}, got {role!r} for {key!r}")
        if path is not None and (key == path or Path(key).name == Path(path).name and Path(key).name):
            return role
        if sha is not None and len(key) >= 8 and sha.startswith(key.lower()):
            return role
    name = (path or "").lower()
    return "small" if "small" in name else "in_domain" if "qqp" in name else "full"


def _row_params(cell: dict, row: dict) -> dict:
    resolved = (row.get("resolved") or {}).get("params")
    if isinstance(resolved, dict):
        return dict(resolved)
    params = dict(cell.get("params") or {})
    for key, value in row["point"].items():
        if key.startswith("params."):
            params[key[len("params.") :]] = value
    return params


def _read_cost(path: Path) -> dict | None:
    """The benchmark's JSON when ``path`` holds one, else None (other files go to :func:`load_results`)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if isinstance(data, dict) and data.get("format") == COST_FORMAT:
        from ..results.files import ResultsError

        for key in ("lengths", "request_bytes", "denoisers"):
            if key not in data:
                raise ResultsError(f"{path}: field '{key}': is missing (a {COST_FORMAT} file)")
        data["_path"] = str(path)
        return data
    return None


def collect(paths: Iterable[str | os.PathLike], roles: Mapping[str, str] | None = None) -> SndResults:
    """Read ``paths``: snd_downstream rows (the newest file of each cell), clipped token-inversion curves and the
    newest cost benchmark. A file that is neither a result file nor a cost benchmark raises
    :class:`~textfree.results.files.ResultsError`."""
    from ..attacks.report import collect as collect_attacks
    from ..results.files import load_results

    newest: dict[str, tuple[dict, Path]] = {}
    update: tuple[dict, Path] | None = None
    attack_files: list[Path] = []
    costs: list[dict] = []
    for f in _json_files(paths):
        cost = _read_cost(f)
        if cost is not None:
            costs.append(cost)
            continue
        data = load_results(f)
        kind = data.get("kind") or data["cell"].get("kind")
        if kind == KIND:
            name = data["cell"]["name"]
            if name not in newest or data["date"] >= newest[name][0]["date"]:
                newest[name] = (data, f)
        elif kind == "token_inversion" and (data["cell"].get("mechanism") or {}).get("name") == "clipped":
            attack_files.append(f)
        elif kind == UPDATE_KIND and (update is None or data["date"] >= update[0]["date"]):
            update = (data, f)
    rows: list[SndRow] = []
    files: list[SourceFile] = []
    encoders: set[str] = set()
    for name in sorted(newest):
        data, f = newest[name]
        cell = data["cell"]
        encoders.add(str(cell.get("encoder")))
        files.append(SourceFile(f, name, KIND, data["date"], (data.get("git") or {}).get("commit"), data["seeds"]))
        for r in data["results"]:
            params = _row_params(cell, r)
            pipeline = str(params.get("pipeline"))
            eta = params.get("eta")
            eta = INF if pipeline == "clean" or eta is None else float(eta)
            path = params.get("denoiser")
            sha = (r.get("provenance") or {}).get("denoiser_sha256") or params.get("denoiser_sha256")
            rows.append(
                SndRow(name, str(params.get("task")), pipeline, eta, path, sha, _role(path, sha, roles), r["metrics"])
            )
    updates = []
    if update is not None:
        data, f = update
        commit = (data.get("git") or {}).get("commit")
        files.append(SourceFile(f, data["cell"]["name"], UPDATE_KIND, data["date"], commit, data["seeds"]))
        for r in data["results"]:
            params = _row_params(data["cell"], r)
            means = {k: (v or {}).get("mean") for k, v in r["metrics"].items()}
            updates.append({"base": int(params["base_samples"]), "denoiser": int(params["denoiser_samples"]),
                            "eta": float(params["eta"]), **means})  # fmt: skip
    attacks = collect_attacks(attack_files) if attack_files else []
    for c in attacks:
        files.append(SourceFile(Path(c.source), c.name, "token_inversion", c.date, c.git, c.seeds))
    cost = max(costs, key=lambda c: str(c.get("date", ""))) if costs else None
    if cost is not None:
        files.append(SourceFile(Path(cost["_path"]), "client cost benchmark", "benchmark", str(cost.get("date")), None))
    return SndResults(rows, attacks, cost, files, encoders, updates)


# ------------------------------------------------------------------------------------------------------ formatting
def _f(value: float | None, spec: str = ".3f") -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _eta(eta: float) -> str:
    return "inf" if eta == INF else f"{eta:g}"


def _pm(row: SndRow | None, metric: str, spec: str = ".3f") -> str:
    if row is None:
        return "–"
    mean, se = row.mean(metric), row.stderr(metric)
    if math.isnan(mean):
        return "–"
    return format(mean, spec) + ("" if math.isnan(se) or se == 0 else f" ± {se:.{spec[1:-1] or '3'}f}")


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in body]


# ------------------------------------------------------------------------------------------------------ verdicts
@dataclass
class Target:
    """One line of the summary: what the issue asks, the paper's figure, ours, and met / not met / not measured."""

    name: str
    paper: str
    measured: str
    verdict: str
    note: str = ""


def _verdict(checks: Sequence[bool | None]) -> str:
    """``checks`` one per required comparison, None where it could not be measured."""
    if any(c is False for c in checks):
        return "not met"
    if not checks or any(c is None for c in checks):
        return "not measured"
    return "met"


def _per_eta(values: Mapping[float, float]) -> str:
    return " / ".join(f"{_eta(e)}: {_f(v)}" for e, v in values.items())


def _cos_target(res: SndResults, model: str, role: str = "full") -> Target:
    paper = PAPER_SIM[model]["snd"]["cos"]
    ours = {e: res.value("qqp", "snd", e, "cos", role=role) for e in paper}
    checks = [None if math.isnan(ours[e]) else ours[e] >= paper[e] for e in paper]
    return Target(f"COS(denoised, clean) on QQP >= {model}'s SnD row (Table 11){_ROLE_NOTES.get(role, '')}",
                  _per_eta(paper), _per_eta(ours), _verdict(checks))  # fmt: skip


def _auc_baseline_target(res: SndResults, role: str = "full") -> Target:
    etas = res.etas("qqp") or [50.0, 100.0, 500.0]
    checks, shown, missing = [], {}, set()
    for e in etas:
        snd = res.value("qqp", "snd", e, "auc", role=role)
        base = {b: res.value("qqp", b, e, "auc") for b in _BASELINES}
        present = [v for v in base.values() if not math.isnan(v)]
        missing |= {b for b, v in base.items() if math.isnan(v)}
        best = max(present) if present else math.nan
        shown[e] = f"{_f(snd)} vs {_f(best)}"
        if math.isnan(snd) or not present:
            checks.append(None)
        elif snd < (1 + AUC_GAIN) * best:
            checks.append(False)
        else:
            checks.append(True if len(present) == len(_BASELINES) else None)
    note = f"missing baseline(s): {', '.join(sorted(missing))}" if missing else ""
    return Target(
        f"AUC on QQP: SnD >= {1 + AUC_GAIN:.2f} x the best of TokEmbPriv, Text2Text, server-side denoiser, each eta"
        + _ROLE_NOTES.get(role, ""),
        "SnD 0.583-0.610 vs best baseline 0.541-0.545 (DistilBERT, Table 5)",
        " / ".join(f"{_eta(e)}: {s}" for e, s in shown.items()),
        _verdict(checks),
        note,
    )


def _auc_paper_target(res: SndResults) -> Target:
    paper = PAPER_AUC["DistilBERT"]["snd"]
    ours = {e: res.value("qqp", "snd", e, "auc") for e in paper}
    checks = [None if math.isnan(ours[e]) else ours[e] >= paper[e] for e in paper]
    return Target("AUC on QQP >= DistilBERT's SnD row (Table 5)", _per_eta(paper), _per_eta(ours), _verdict(checks))


def acc_losses(res: SndResults) -> dict[tuple[str, float], float]:
    """(task, eta) -> relative ACC loss of SnD vs clean, ``(clean - snd) / clean``, at :data:`PAPER_ACC_ETAS`."""
    out = {}
    for task in ("cola", "mrpc", "rte", "qqp"):
        clean = res.value(task, "clean", INF, "acc")
        for e in PAPER_ACC_ETAS:
            snd = res.value(task, "snd", e, "acc")
            out[(task, e)] = (clean - snd) / clean if clean > 0 and not math.isnan(snd) else math.nan
    return out


def _acc_target(res: SndResults) -> Target:
    losses = acc_losses(res)
    got = [v for v in losses.values() if not math.isnan(v)]
    missing = [f"{TASK_TITLES[t]} {_eta(e)}" for (t, e), v in losses.items() if math.isnan(v)]
    mean = sum(got) / len(got) if got else math.nan
    if not got:
        verdict = "not measured"
    elif mean > PAPER_AVG_ACC_LOSS:
        verdict = "not met"
    else:
        verdict = "met" if not missing else "not measured"
    measured = "–" if not got else f"{100 * mean:.2f}% over {len(got)} of {len(losses)} (task, eta)"
    note = f"missing: {', '.join(missing)}" if missing else ""
    return Target(
        "Average relative ACC loss of SnD vs clean, CoLA/MRPC/RTE/QQP at eta 100 and 500 (Table 1's etas)",
        f"<= {100 * PAPER_AVG_ACC_LOSS:.2f}% (BERT models, section 4.4.2)",
        measured,
        verdict,
        note,
    )


def cost_ratios(cost: Mapping[str, Any] | None) -> tuple[dict[str, float], str]:
    """(denoiser role (or name) -> median ratio client total / local MiniLM, the prompt it was timed at): the
    128-token prompt where the denoisers read it, else the longest prompt at which they were timed."""
    if not cost:
        return {}, ""
    names = {d["name"]: d.get("role") or d["name"] for d in cost["denoisers"]}

    def trained(e: Mapping[str, Any]) -> dict[str, float]:  # the ratios of denoisers that read this prompt
        return {k: v for k, v in (e.get("ratio_to_local") or {}).items() if k not in (e.get("shape_only") or {})}

    timed = [e for e in cost["lengths"] if trained(e)]
    entry = next((e for e in timed if int(e.get("tokens", 0)) == 128), None) or max(
        timed, key=lambda e: int(e.get("tokens", 0)), default=None
    )
    if entry is None:
        return {}, ""
    ratios = {names.get(k, k): float(v) for k, v in trained(entry).items()}
    return ratios, f"{entry.get('label', '')}, {int(entry.get('tokens', 0))} tokens"


def _small_cost_target(res: SndResults) -> Target:
    ratios, where = cost_ratios(res.cost)
    small = ratios.get("small", math.nan)
    verdict = "not measured" if math.isnan(small) else "met" if small <= SMALL_COST_MAX else "not met"
    return Target(
        f"Client cost with the small denoiser <= 25% of running all-MiniLM-L6-v2 locally ({where or '128 tokens'})",
        "– (the paper has no small denoiser; Table 14: 0.026 s per sample, DistilBERT)",
        "–" if math.isnan(small) else f"{100 * small:.1f}% (median of per-round ratios)",
        verdict,
    )


def gain_ratios(res: SndResults) -> dict[tuple[str, float], float]:
    """(task, eta) -> the small denoiser's cosine gain over TokEmbPriv as a fraction of the full one's."""
    out = {}
    for task in res.tasks():
        for e in res.etas(task):
            tok = res.value(task, "tokembpriv", e, "cos")
            full = res.value(task, "snd", e, "cos", role="full")
            small = res.value(task, "snd", e, "cos", role="small")
            if any(math.isnan(v) for v in (tok, full, small)) or full <= tok:
                continue
            out[(task, e)] = (small - tok) / (full - tok)
    return out


def _small_gain_target(res: SndResults) -> Target:
    ratios = gain_ratios(res)
    if not ratios:
        verdict, measured = "not measured", "–"
    else:
        verdict = "met" if min(ratios.values()) >= SMALL_GAIN_MIN else "not met"
        measured = ", ".join(f"{TASK_TITLES.get(t, t)} {_eta(e)}: {100 * v:.0f}%" for (t, e), v in ratios.items())
    return Target(
        "Small denoiser keeps >= 90% of the full denoiser's COS gain over TokEmbPriv (every task and eta measured)",
        "–",
        measured,
        verdict,
    )


def summary_targets(res: SndResults) -> list[Target]:
    """The issue's targets, judged from ``res`` (with the in-domain denoiser's rows beside where it ran)."""
    targets = [_cos_target(res, "DistilBERT"), _cos_target(res, "BERT-base"), _auc_baseline_target(res)]
    if any(r.task == "qqp" and r.role == "in_domain" for r in res.rows):
        targets += [_cos_target(res, "DistilBERT", "in_domain"), _auc_baseline_target(res, "in_domain")]
    return targets + [_auc_paper_target(res), _acc_target(res), _small_cost_target(res), _small_gain_target(res)]


# ------------------------------------------------------------------------------------------------------ sections
def _summary(res: SndResults) -> list[str]:
    targets = summary_targets(res)
    body = [[t.name, t.paper, t.measured, f"**{t.verdict}**" + (f" ({t.note})" if t.note else "")] for t in targets]
    return ["## Summary: the targets", ""] + _table(["target", "paper", "ours", "verdict"], body)


def _acc_section(res: SndResults) -> list[str]:
    tasks = res.tasks()
    etas = res.etas()
    header = ["task"] + [f"SnD eta {_eta(e)}" for e in etas] + ["clean (eta = inf)", "DistilBERT (100 / 500 / inf)",
                                                                  "BERT-base (100 / 500 / inf)"]  # fmt: skip
    body = []
    for t in tasks:
        cells = [_pm(res.find(t, "snd", e), "acc") for e in etas] + [_pm(res.find(t, "clean", INF), "acc")]
        paper = [" / ".join(_f(v) for v in PAPER_ACC[m].get(t, {}).values()) or "–" for m in PAPER_ACC]
        body.append([TASK_TITLES.get(t, t)] + cells + paper)
    losses = acc_losses(res)
    lines = [
        "## Downstream accuracy (Tables 1-3 shape)",
        "",
        "ACC of the probe on the task's test split (`mean ± stderr` over seeds), SnD with the full denoiser at each",
        "eta and the clean embeddings (eta = inf); the paper's BERT rows of Table 1 beside (their own models and",
        "probes: compare shapes, not digits).",
        "",
    ] + _table(header, body)
    got = {k: v for k, v in losses.items() if not math.isnan(v)}
    if got:
        lines += ["", "Relative ACC loss vs clean, `(clean - SnD) / clean`: " + ", ".join(
            f"{TASK_TITLES[t]} {_eta(e)}: {100 * v:.2f}%" for (t, e), v in got.items()) + "."]  # fmt: skip
    chance = [t for t in tasks if (row := res.find(t, "clean", INF)) is not None and row.mean("auc") < CHANCE_AUC]
    if chance:
        lines += ["", f"Read the ACC loss with care: on {', '.join(TASK_TITLES.get(t, t) for t in chance)} the clean "
                  f"embeddings' probe is near chance (AUC below {CHANCE_AUC}), so its accuracy is the majority "
                  "class's and a loss against it measures little (the averaged target includes them)."]  # fmt: skip
    return lines


def _pipeline_table(res: SndResults, task: str, metrics: Sequence[str], paper: bool) -> list[str]:
    etas = sorted(set(res.etas(task)) | ({50.0, 100.0, 500.0} if paper else set()))
    header = ["pipeline"] + (["metric"] if len(metrics) > 1 else []) + [f"eta {_eta(e)}" for e in etas]
    body = []
    for key in res.row_keys(task):
        pipeline, role = key
        if pipeline == "clean":
            continue
        for m in metrics:
            title = ROW_TITLES.get(key, f"{pipeline} ({role})" if role else pipeline)
            cells = [_pm(res.find(task, pipeline, e, role), m) for e in etas]
            body.append([title] + ([m.upper()] if len(metrics) > 1 else []) + cells)
    if paper:
        for model in PAPER_AUC:
            for pipe in ("tokembpriv", "text2text", "rapt", "snd"):
                for m in metrics:
                    source = PAPER_AUC[model].get(pipe) if m == "auc" else PAPER_SIM[model].get(pipe, {}).get(m)
                    if not source:
                        continue
                    title = f"paper, {model}: {PAPER_TITLES[pipe]}"
                    cells = [_f(source.get(int(e)) if e == int(e) else None) for e in etas]
                    body.append([f"*{title}*"] + ([m.upper()] if len(metrics) > 1 else []) + cells)
    return _table(header, body)


def _auc_section(res: SndResults) -> list[str]:
    lines = [
        "## AUC per pipeline (Tables 5-7 shape)",
        "",
        "ROC AUC of the probe, every pipeline at each eta (`mean ± stderr`); on QQP the paper's Table 5 rows for",
        "DistilBERT and BERT-base beside (italic). TokEmbPriv here clips its noisy tokens (SnD's eq. 3), which only",
        "helps it; the paper's baseline does not clip.",
    ]
    for t in res.tasks():
        lines += ["", f"### {TASK_TITLES.get(t, t)}", ""] + _pipeline_table(res, t, ["auc"], paper=t == "qqp")
    return lines


def _sim_section(res: SndResults) -> list[str]:
    lines = [
        "## Similarity to the clean embedding (Tables 11-13 shape)",
        "",
        "MSE (mean over dimensions) and COS of each test sentence's embedding to its clean one, mean over the test",
        "sentences; on QQP the paper's Table 11 rows beside (italic; their embeddings are 768-wide BERT outputs, ours",
        "384-wide MiniLM outputs, so MSE is on another scale: compare COS).",
    ]
    for t in res.tasks():
        lines += ["", f"### {TASK_TITLES.get(t, t)}", ""] + _pipeline_table(res, t, ["mse", "cos"], paper=t == "qqp")
    return lines


def _nsr_section(res: SndResults) -> list[str]:
    etas = sorted(set(res.etas()) | {50.0, 100.0, 500.0})
    default = res.encoders <= {"default"} and bool(res.encoders)
    body = []
    for e in etas:
        noisy = [r for r in res.rows if _same(r.eta, e) and r.pipeline != "clean"]
        nsr = [r.mean("noise_to_signal") for r in noisy if not math.isnan(r.mean("noise_to_signal"))]
        eff = [r.mean("effective_noise_to_signal") for r in noisy if r.pipeline in ("tokembpriv", "snd")]
        eff = [v for v in eff if not math.isnan(v)]
        ours = sum(nsr) / len(nsr) if nsr else math.nan
        norm = (OUR_DEFAULT_DIM / e) / ours if default and ours > 0 else math.nan
        body.append([
            _eta(e),
            _f(OUR_DEFAULT_DIM / e, ".3g") if default else "–",
            _f(norm, ".3f"),
            _f(ours, ".3g"),
            _f(sum(eff) / len(eff) if eff else math.nan, ".3g"),
            _f(PAPER_DIM / e, ".3g"),
            _f(PAPER_DIM / e / ASSUMED_BERT_MEAN_TOKEN_NORM, ".3g"),
        ])  # fmt: skip
    header = ["eta", "ours: E‖z‖ = d/eta (d = 384)", "ours: mean ‖x‖ (measured)", "ours: E‖z‖ / mean ‖x‖",
              "ours: effective, after clipping", "paper: E‖z‖ (d = 768)",
              f"paper: E‖z‖ / mean ‖x‖ (ASSUMED mean ‖x‖ = {ASSUMED_BERT_MEAN_TOKEN_NORM:g})"]  # fmt: skip
    return [
        "## Noise-to-signal per eta",
        "",
        "`E‖z‖ / mean ‖x‖`: the L2-Laplace noise's expected norm (d / eta, before clipping) over the mean norm of the",
        "clean token embeddings of the evaluated sentences (ours: from the result files, mean over cells; the mean",
        "norm is recovered from it as (d / eta) / ratio, which is only valid for the cells' `default` encoder). The",
        "*effective* column is the noise actually added after clipping to C (TokEmbPriv and SnD rows). The paper's",
        "figure needs BERT's mean token-embedding norm, which this project does not have (no BERT weights): the last",
        f"column ASSUMES {ASSUMED_BERT_MEAN_TOKEN_NORM:g} and is an order of magnitude, not a measurement. At equal",
        "eta the paper's noise is twice as long (d = 768 vs 384) on embeddings of a different norm: equal eta is not",
        "equal noise.",
        "",
    ] + _table(header, body)


def _cost_section(res: SndResults) -> list[str]:
    lines = ["## Client cost (Table 14 shape)", ""]
    raw = 128 * PAPER_DIM * 4
    paper_note = (
        f"The paper reports {PAPER_COST['DistilBERT']['comm_mb']} MB per request (Table 14) for 128 tokens, but 128 "
        f"token embeddings of width 768 in float32 are 128 x 768 x 4 = {raw:,} bytes (~{raw / 1e6:.2f} MB): the "
        "paper's figure is about 2,800x too small for the payload it describes."
    )
    cost = res.cost
    if not cost:
        return lines + ["No client-cost benchmark file was given (run `benchmarks/bench_snd_client_cost.py`).", "",
                        paper_note]  # fmt: skip
    settings = cost.get("settings", {})
    lines += [
        f"From `{Path(cost['_path']).name}` ({cost.get('date')}, host {cost.get('host', {}).get('machine', '?')}, "
        f"{settings.get('threads', '?')} torch thread(s), {settings.get('rounds', '?')} interleaved rounds, eta "
        f"{settings.get('eta', '?')}, encoder {settings.get('encoder', '?')}). Medians per prompt in ms; the ratio is "
        "the median over rounds of (client total / local MiniLM) of the same round, so machine noise cancels.",
        "",
    ]
    names = [d["name"] for d in cost["denoisers"]]
    roles = {d["name"]: d.get("role") or d["name"] for d in cost["denoisers"]}
    header = ["prompt", "tokens", "lookup", "noise + clip"] + [f"denoiser: {roles[n]}" for n in names]
    header += ["local MiniLM"] + [f"client total ({roles[n]}) / local" for n in names]
    body = []
    for entry in cost["lengths"]:
        med = entry.get("medians_s", {})
        ms = [_f(1000 * med[k], ".3g") if k in med else "–" for k in ["lookup", "noise_clip"]]
        ms += [_f(1000 * med.get(f"denoiser:{n}", math.nan), ".3g") for n in names]
        ms += [_f(1000 * med.get("local_minilm", math.nan), ".3g")]
        skipped, shape = entry.get("skipped") or {}, entry.get("shape_only") or {}
        ratio = [
            f"not timed ({skipped[n]})" if n in skipped else _f(100 * entry.get("ratio_to_local", {}).get(n, math.nan),
                                                                   ".1f") + "%" + (" (untrained, same shape)" if n in
                                                                                   shape else "")
            for n in names
        ]  # fmt: skip
        body.append([str(entry.get("label", "")), str(entry.get("tokens", "")), *ms, *ratio])
    lines += _table(header, body)
    rb = cost["request_bytes"]
    lines += ["", "| quantity | ours | paper (Table 14) |", "|---|---|---|"]
    for e in cost["lengths"]:
        if int(e.get("tokens", 0)) == 128:
            totals, shape = e.get("client_total_s", {}), e.get("shape_only") or {}
            for n in names:
                timing_only = " (an untrained denoiser of its shape: timing only)" if n in shape else ""
                lines.append(f"| client computation per request, {roles[n]} denoiser (128 tokens) | "
                             f"{_f(totals.get(n, math.nan), '.4f')} s (CPU, 1 thread){timing_only} | "
                             f"{PAPER_COST['DistilBERT']['comp_s']} s DistilBERT, "
                             f"{PAPER_COST['BERT-base']['comp_s']} s BERT-base |")  # fmt: skip
    lines.append(f"| bytes of one `/v1/embed` request body ({rb.get('tokens')} tokens, width {rb.get('dim')}) | "
                 f"{rb.get('bytes', 0):,} bytes ({rb.get('bytes', 0) / 1e6:.3f} MB; raw float32 vectors "
                 f"{rb.get('raw_float32_bytes', 0):,}) | {PAPER_COST['DistilBERT']['comm_mb']} MB |")  # fmt: skip
    for d in cost["denoisers"]:
        lines.append(f"| denoiser file `{d['name']}` ({roles[d['name']]}; one-time download) | "
                     f"{d.get('file_bytes', 0):,} bytes ({d.get('file_bytes', 0) / 1e6:.2f} MB), "
                     f"{d.get('n_layers', '?')} layers | not counted |")  # fmt: skip
    return lines + ["", paper_note + f" Ours measures the real body: {rb.get('bytes', 0):,} bytes."]


def _mi_section(res: SndResults, figure: str | None) -> list[str]:
    tasks = [t for t in res.tasks() if any(not math.isnan(r.mean("mi_kl")) for r in res.rows if r.task == t)]
    lines = ["## Mutual information per eta", "", _MI_CAVEAT, ""]
    if not tasks:
        return lines + ["No mi_kl values in the result files."]
    etas = res.etas()
    body = []
    for t in tasks:
        cells = []
        for e in etas:
            vals = [r.mean("mi_kl") for r in res.rows if r.task == t and _same(r.eta, e)]
            vals = [v for v in vals if not math.isnan(v)]
            cells.append(_f(sum(vals) / len(vals) if vals else math.nan, ".4g"))
        body.append([TASK_TITLES.get(t, t)] + cells)
    lines += ["mi_kl (nats; mean over the task's noisy cells, which share the token sample):", ""]
    lines += _table(["task"] + [f"eta {_eta(e)}" for e in etas], body)
    if figure:
        lines += ["", f"![mutual information per eta]({figure})"]
    return lines


def _update_section(res: SndResults) -> list[str]:
    lines = ["## After the server updates its model (Table 10 shape)", ""]
    if not res.updates:
        return lines + ["No `snd_model_update` result file was given (`examples/cells/snd/model_update.yaml`)."]
    bases = sorted({u["base"] for u in res.updates})
    dens = sorted({u["denoiser"] for u in res.updates})
    etas = sorted({u["eta"] for u in res.updates})
    lines += [
        "The server's encoder fine-tuned on `base` SST-2 sentences (one epoch, its word-embedding table frozen), then",
        "the stale denoiser fine-tuned on `denoiser` public texts (one epoch; 0: unchanged); cosine (MSE) of the",
        "denoised embedding to the UPDATED encoder's clean one on held-out public texts, eta "
        f"{', '.join(map(_eta, etas))}.",
        "The paper's Table 10 reports MRPC AUC for BERT-base instead (a downstream figure): compare the pattern, a",
        "loss that grows with `base` at 0 denoiser samples and a recovery with 100-1,000 of them.",
        "",
    ]  # fmt: skip
    find = {(u["base"], u["denoiser"]): u for u in res.updates}
    body = []
    for d in dens:
        cells = []
        for b in bases:
            u = find.get((b, d))
            cells.append("—" if u is None else f"{_f(u.get('cos_denoised'))} ({_f(u.get('mse_denoised'), '.4f')})")
        body.append([f"denoiser fine-tuned on {d}"] + cells)
    noisy = [find.get((b, dens[0])) for b in bases]
    body.append(["no denoising (e_n)"] + ["—" if u is None else f"{_f(u.get('cos_noisy'))} "
                                          f"({_f(u.get('mse_noisy'), '.4f')})" for u in noisy])  # fmt: skip
    lines += _table(["cos (MSE)"] + [f"base {b}" for b in bases], body)
    lines += [
        "",
        "Paper, Table 10 (BERT-base, MRPC AUC at eta 100; rows: denoiser samples, columns: base samples):",
        "",
    ]
    lines += _table(["denoiser samples"] + [f"base {b}" for b in PAPER_UPDATE_AUC[0]],
                    [[str(d)] + [_f(v) for v in row.values()] for d, row in PAPER_UPDATE_AUC.items()])  # fmt: skip
    return lines


def _attack_section(res: SndResults) -> list[str]:
    lines = ["## Attacks on SnD's payload (clipped token noise)", ""]
    if not res.attacks:
        return lines + ["No token_inversion result files of the clipped mechanism were given.", "",
                        _DENOISER_SENTENCE]  # fmt: skip
    lines += [
        "Tokens recovered (%, `mean ± sd` over seeds) from the clipped noisy token embeddings X~ a client sends,",
        "by nearest neighbour (L2, cosine) and BeamClean with estimated noise (see docs/results/attacks.md).",
    ]
    cols = (("recovery_nn_l2", "NN L2"), ("recovery_nn_cosine", "NN cosine"),
            ("recovery_beamclean_estimated", "BeamClean"))  # fmt: skip
    for c in res.attacks:
        lines += ["", f"### {c.title} (`{c.name}`)", ""]
        body = []
        for p in sorted(c.points, key=lambda p: (p.x is None, p.x)):
            row = [str(p.x)]
            for metric, _ in cols:
                s = p.spread(metric)
                row.append("–" if s is None else f"{100 * s['mean']:.1f}" + (
                    "" if math.isnan(s["std"]) else f" ± {100 * s['std']:.1f}"))  # fmt: skip
            body.append(row)
        lines += _table([c.axis_label.replace("epsilon", "eta")] + [t for _, t in cols], body)
    return lines + ["", _DENOISER_SENTENCE]


def _files_section(res: SndResults, paths: Sequence[str], out: str) -> list[str]:
    lines = ["## Files", "", "| file | cell | kind | date | git commit |", "|---|---|---|---|---|"]
    lines += [f"| `{f.path.name}` | `{f.cell}` | {f.kind} | {f.date} | {(f.git or 'unknown')[:10]} |"
              for f in res.files]  # fmt: skip
    cmd = "textfree snd report " + " ".join(shlex.quote(str(p)) for p in paths) + f" --out {shlex.quote(out)}"
    return lines + ["", "Regenerate this report with:", "", "```", cmd, "```"]


def _bounds_section(res: SndResults) -> list[str]:
    """What bounds the QQP targets, from the rows: the clean probe's AUC against the AUC the +10% target needs (no
    pipeline that approximates the clean embedding can be expected above the clean probe), and the in-domain
    denoiser's COS beside the default one's (whether the corpus's domain closes the COS gap)."""
    clean = res.value("qqp", "clean", INF, "auc")
    lines = ["## What bounds the QQP targets", ""]
    needed = {}
    for e in res.etas("qqp"):
        base = [v for b in _BASELINES if not math.isnan(v := res.value("qqp", b, e, "auc"))]
        if base:
            needed[e] = (1 + AUC_GAIN) * max(base)
    if needed and not math.isnan(clean):
        above = [e for e, v in needed.items() if v > clean]
        lines.append(
            f"* AUC +{100 * AUC_GAIN:.0f}%: the target needs SnD's AUC at "
            + ", ".join(f"eta {_eta(e)} >= {_f(v)}" for e, v in needed.items())
            + f"; the probe on the *clean* embeddings scores {_f(clean)}"
            + (
                f", so at eta {', '.join(_eta(e) for e in above)} the target asks more than the clean embedding "
                "gives (a denoiser approximates the clean embedding; one seed's probe noise aside, it cannot be "
                "expected above it)."
                if above
                else "."
            )
        )
    full = {e: res.value("qqp", "snd", e, "cos", role="full") for e in res.etas("qqp")}
    dom = {e: res.value("qqp", "snd", e, "cos", role="in_domain") for e in res.etas("qqp")}
    if any(not math.isnan(v) for v in dom.values()):
        paper = PAPER_SIM["DistilBERT"]["snd"]["cos"]
        lines.append(
            "* COS: with QQP's training questions in the denoiser's corpus (same size, same steps) COS on QQP moves "
            + ", ".join(f"{_f(full[e])} -> {_f(dom[e])} at eta {_eta(e)}" for e in dom)
            + "; DistilBERT's row: "
            + _per_eta(paper)
            + ". The corpus's domain explains part of the gap, not all of it; the rest is the denoiser's training "
            "budget and size (docs/snd.md)."
        )
    return lines if len(lines) > 2 else []


def build_report(
    res: SndResults,
    figures: Mapping[str, str] | None = None,
    paths: Sequence[str] = (),
    out: str = "docs/results/snd.md",
) -> str:
    """The Markdown report of ``res``; ``figures`` maps a figure's key (``acc``, ``auc_cos``, ``mi``) to its link."""
    figures = dict(figures or {})
    lines = [
        "# Split-N-Denoise: results",
        "",
        "<!-- generated by `textfree snd report` from result files; do not edit by hand -->",
        "",
        "Split-N-Denoise (Mai et al. 2023): the client noises its token embeddings (L2-Laplace at eta, clipped to C),",
        "the server runs the encoder on them, and the client denoises the answer with the noise Z it kept. Ours:",
        "all-MiniLM-L6-v2 (d = 384) as both the client's table and the server's model, a denoiser trained on public",
        "text, a two-layer probe per GLUE task. The paper's figures are BERT-family models (d = 768): read them as the",
        "shape to reach, not digits to match. Every figure of ours below comes from the result files listed at the",
        "end.",
        "",
    ]
    lines += _summary(res)
    if bounds := _bounds_section(res):
        lines += [""] + bounds
    lines += [""] + _acc_section(res)
    if "acc" in figures:
        lines += ["", f"![accuracy per eta]({figures['acc']})"]
    lines += [""] + _auc_section(res) + [""] + _sim_section(res)
    if "auc_cos" in figures:
        lines += ["", f"![AUC and COS per pipeline]({figures['auc_cos']})"]
    lines += [""] + _nsr_section(res)
    lines += [""] + _cost_section(res)
    lines += [""] + _mi_section(res, figures.get("mi"))
    lines += [""] + _update_section(res)
    lines += [""] + _attack_section(res)
    lines += [""] + _files_section(res, paths, out)
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------------------- figures
def _eta_axis(ax: Any, etas: Sequence[float]) -> None:
    """A log eta axis with a plain tick at every eta measured."""
    ax.set_xscale("log")
    if etas:
        ax.set_xticks(list(etas), [_eta(e) for e in etas])
        ax.minorticks_off()


def _color(key: tuple[str, str | None]) -> str:
    """One colour per pipeline row, the same in every panel."""
    keys = list(ROW_TITLES)
    return f"C{keys.index(key) % 10}" if key in keys else "black"


def _grid(n: int, ncols: int = 2) -> tuple[int, int]:
    ncols = min(ncols, max(n, 1))
    return math.ceil(n / ncols), ncols


def _acc_figure(res: SndResults, path: Path) -> bool:
    from matplotlib.figure import Figure

    tasks = [t for t in res.tasks() if any(r.task == t and not math.isnan(r.mean("acc")) for r in res.rows)]
    if not tasks:
        return False
    nrows, ncols = _grid(len(tasks))
    fig = Figure(figsize=(4.0 * ncols, 3.0 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, t in zip(axes, tasks):
        for key, style in ((("snd", "full"), "-o"), (("tokembpriv", None), "--s"), (("snd", "small"), ":D")):
            pts = [(e, res.find(t, key[0], e, key[1])) for e in res.etas(t)]
            pts = [(e, r.mean("acc"), r.stderr("acc")) for e, r in pts if r is not None]
            if pts:
                ax.errorbar(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    yerr=[0 if math.isnan(p[2]) else p[2] for p in pts],
                    fmt=style,
                    capsize=3,
                    markersize=4,
                    label=ROW_TITLES[key],
                    color=_color(key),
                )
        clean = res.value(t, "clean", INF, "acc")
        if not math.isnan(clean):
            ax.axhline(clean, color="grey", linestyle=":", label="clean (eta = inf)")
        ax.set(title=TASK_TITLES.get(t, t), xlabel="eta", ylabel="ACC")
        _eta_axis(ax, res.etas(t))
        ax.legend(fontsize=7)
    for ax in axes[len(tasks) :]:
        ax.set_visible(False)
    atomic_save_figure(fig, path, dpi=110)
    return True


def _auc_cos_figure(res: SndResults, path: Path) -> bool:
    from matplotlib.figure import Figure

    tasks = res.tasks()
    if not tasks or not res.etas():
        return False
    fig = Figure(figsize=(8.0, 2.8 * len(tasks)), layout="constrained")
    axes = fig.subplots(len(tasks), 2, squeeze=False)
    for (ax_auc, ax_cos), t in zip(axes, tasks):
        for key in res.row_keys(t):
            if key[0] == "clean":
                continue
            pts = [(e, res.find(t, key[0], e, key[1])) for e in res.etas(t)]
            pts = [(e, r) for e, r in pts if r is not None]
            label = ROW_TITLES.get(key, str(key))
            for ax, metric in ((ax_auc, "auc"), (ax_cos, "cos")):
                ys = [r.mean(metric) for _, r in pts]
                if pts and not all(math.isnan(y) for y in ys):
                    ax.plot([e for e, _ in pts], ys, "-o", markersize=4, label=label, color=_color(key))
        for ax, metric in ((ax_auc, "AUC"), (ax_cos, "COS to clean")):
            ax.set(xlabel="eta", ylabel=metric, title=f"{TASK_TITLES.get(t, t)}: {metric}")
            _eta_axis(ax, res.etas(t))
        ax_auc.legend(fontsize=7)
    atomic_save_figure(fig, path, dpi=110)
    return True


def _mi_figure(res: SndResults, path: Path) -> bool:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.0, 3.4), layout="constrained")
    ax = fig.subplots()
    drawn = False
    for t in res.tasks():
        pts = []
        for e in res.etas(t):
            vals = [r.mean("mi_kl") for r in res.rows if r.task == t and _same(r.eta, e)]
            vals = [v for v in vals if not math.isnan(v)]
            if vals:
                pts.append((e, sum(vals) / len(vals)))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", markersize=4, label=TASK_TITLES.get(t, t))
            drawn = True
    if not drawn:
        return False
    _eta_axis(ax, res.etas())
    ax.set(xlabel="eta", ylabel="KL estimate of I(X; X+Z) (nats)",
           title="Mutual information per eta (biased: compare etas only)")  # fmt: skip
    ax.legend(fontsize=7)
    atomic_save_figure(fig, path, dpi=110)
    return True


def write_report(
    paths: Iterable[str | os.PathLike],
    out: str | os.PathLike,
    *,
    roles: Mapping[str, str] | None = None,
    figures_dir: str | os.PathLike | None = None,
) -> Path:
    """Write the report to ``out`` and its figures to ``<out stem>/`` (or ``figures_dir``); returns ``out``.

    ``roles`` maps a denoiser (path, file name or sha256 prefix) to ``"full"`` or ``"small"``. Raises
    :class:`~textfree.results.files.ResultsError`, writing nothing, when ``paths`` hold no snd_downstream result file
    (an empty report would replace the real one)."""
    from ..results.files import ResultsError

    paths = [str(p) for p in paths]
    res = collect(paths, roles)
    if not res.rows:
        raise ResultsError(
            f"no {KIND} result files in {', '.join(paths) or '(nothing given)'} (a directory is searched for *.json "
            "directly inside it): nothing written"
        )
    out = Path(out)
    folder = Path(figures_dir) if figures_dir else out.parent / out.stem
    links = {}
    for key, draw in (("acc", _acc_figure), ("auc_cos", _auc_cos_figure), ("mi", _mi_figure)):
        png = folder / f"{key}.png"
        if draw(res, png):
            links[key] = os.path.relpath(png, out.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, build_report(res, links, paths, str(out)))
    return out
