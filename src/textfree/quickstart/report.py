"""What ``textfree quickstart`` prints: the worked example, the table per eta, the privacy spent, the bytes that
crossed the wire and the time; or one JSON object (``--json``). It formats the result of
:func:`.runner.run_search` (plus the CLI's server and timing fields) and computes nothing."""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["render", "to_json", "TABLE_TITLE", "DENOISER_HINT"]

TABLE_TITLE = "privatized semantic search over the FAQ"
COLUMNS = ("eta", "noise to signal", "top-1", "top-3", "cos to clean", "bytes per request", "eps per token",
           "eps per question")  # fmt: skip
LEGEND = "clean: each question's own embedding, computed here and never sent (the reference)"
LEGEND_SND = "+SnD: the server's answer denoised here"
DENOISER_HINT = (
    "no denoiser: the rows show the server's raw answers. Train one on public text (textfree snd train "
    "--model default --out runs/snd-minilm) and rerun with --denoiser runs/snd-minilm to denoise them here."
)


def _short(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


def _eps(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _label(row: dict) -> str:
    if row["eta"] is None:
        return "clean"
    return f"{row['eta']:g}" + ("+SnD" if row["pipeline"] == "denoised" else "")


def render(result: dict[str, Any], console) -> None:
    """Print ``result`` on the rich ``console``."""
    from rich import box
    from rich.table import Table

    server, rows = result.get("server") or {}, result["rows"]
    sent_rows = [r for r in rows if r["sent"]]
    p = console.print
    p("[bold]textfree quickstart[/]: private questions, answered by a server that never sees them", highlight=False)
    if server:
        p(
            f"server    textfree serve, pid {server['pid']}, {server['url']} (loopback), model {result['model']} = "
            f"{result['encoder']} split: the client sends noisy token embeddings, the server runs the encoder's "
            f"layers on them; ready in {server['startup_s']:.1f} s",
            highlight=False,
        )
    c = result["corpus"]
    p(
        f"corpus    {c['answers']} public FAQ answers (embedded here, in clear) and {c['questions']} private user "
        "questions (privatized here; their text never leaves this process)",
        highlight=False,
    )
    ex = result["example"]
    p(f'\nexample   "{ex["question"]}"', highlight=False, markup=False)
    if sent_rows:
        rec = sent_rows[-1]["example_received"]
        shape = " x ".join(map(str, rec["shape"]))
        p(
            f"  server received  POST /v1/embed, {rec['body_bytes']:,} bytes: a {shape} {rec['dtype']} tensor of "
            "noisy token embeddings, its mask and a JSON header (encoder, mechanism, eta); no text, no token ids",
            highlight=False,
        )
    found = [f"{k}: {v} {'OK' if v == ex['answer'] else 'wrong'}" for k, v in ex["found"].items()]
    p("  answer found     " + " | ".join(found), highlight=False, markup=False)
    best = ex["found"].get(next(reversed(ex["found"])))
    if best in ex["answers"]:
        p(f'                   "{_short(ex["answers"][best])}"', highlight=False, markup=False)
    t = Table(title=TABLE_TITLE, title_justify="left", box=box.SIMPLE_HEAD)
    for col in COLUMNS:
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            _label(r),
            f"{r['noise_to_signal']:.2f}",
            f"{r['top1']:.2f}",
            f"{r['top3']:.2f}",
            f"{r['cos_to_clean']:.3f}",
            f"{r['body_bytes_mean']:,.0f}" if r["sent"] else "0",
            _eps(r["privacy_per_token"]["epsilon"]) if r["sent"] else "-",
            _eps(r["privacy_per_question_mean"]) if r["sent"] else "-",
        )
    p()
    console.print(t)
    denoised = any(r["pipeline"] == "denoised" for r in rows)
    p(LEGEND + (f"; {LEGEND_SND}" if denoised else ""), highlight=False)
    if sent_rows:
        r = sent_rows[0]
        p(
            f"privacy   per token: eta d_chi privacy (notion '{r['privacy_notion']}'), eps = eta x B with B = "
            f"{r['input_diameter']:.3f} = 2C, the largest distance between two clipped token embeddings (C = "
            f"{result['clip_norm']:.3f}); per question: its n tokens composed, n x eta x B (mean over the questions "
            "shown; the library's own accounting of each payload sent)",
            highlight=False,
        )
        embed = result["wire"].get("POST /v1/embed", {})
        others = {k: v for k, v in result["wire"].items() if k != "POST /v1/embed"}
        n = embed.get("requests", 0)
        other_text = ", ".join(
            f"{v['requests']} {k} ({v['body_bytes']} body bytes; {v['response_bytes']:,} bytes received)"
            for k, v in others.items()
        )
        p(
            f"wire      one POST /v1/embed per question: body {embed.get('body_bytes', 0) / max(n, 1):,.0f} bytes on "
            f"average + {embed.get('head_bytes', 0) / max(n, 1):,.0f} bytes of HTTP request line and headers; the "
            f"reply {embed.get('response_bytes', 0) / max(n, 1):,.0f} bytes (the sentence embedding, JSON). In all "
            f"{n} such requests, {embed.get('body_bytes', 0):,} body bytes; besides them: {other_text or 'nothing'}",
            highlight=False,
        )
    if result.get("denoised"):
        d = result["denoiser"] or {}
        p(
            f"denoiser  {str(d.get('sha256'))[:12]}... (public, trained on public text; eta {d.get('eta_min'):g}.."
            f"{d.get('eta_max'):g}), downloaded from the server once and run here on X~ and the noise Z, which "
            "never leave this process",
            highlight=False,
        )
    else:
        p(f"denoiser  {DENOISER_HINT}", highlight=False)
    if result.get("seeded"):
        p("seed      --seed makes the noise reproducible: NOT private (experiments only)", highlight=False)
    s = result.get("seconds", {})
    queries = sum(r["requests"] for r in sent_rows if r["pipeline"] == "server")
    per = [r["seconds_per_question"] for r in sent_rows if r["pipeline"] == "server"]
    p(
        f"time      {s.get('total', 0):.1f} s in all: encoder load here {s.get('local_load', 0):.1f} s, server start "
        f"{s.get('server_start', 0):.1f} s, clean reference here {s.get('local_reference', 0):.1f} s, {queries} "
        f"private queries {1000 * sum(per) / max(len(per), 1):.0f} ms each (privatize + round trip)"
        + (f"; server pid {server['pid']} stopped" if server.get("stopped") else ""),
        highlight=False,
    )


def to_json(result: dict[str, Any]) -> str:
    """``result`` as one line of JSON (infinite losses as null)."""

    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(result))
