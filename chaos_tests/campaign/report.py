"""The campaign report: `report.json` (every round: seed, schedule, checker verdicts with their
anomalies and the operations involved, op counts, timeline series) and `report.html`, one SVG
timeline per round drawn here (no plotting library): throughput (acknowledged writes per
second) and latency (mean and max per bucket, ms) over time, fault windows shaded, like
Jepsen's plots, then each checker's verdict and anomalies.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

BUCKET_S = 0.5
COLORS = {"kill": "#d62728", "pause": "#9467bd", "restart": "#8c564b", "controller-kill": "#e377c2",
          "isolate": "#1f77b4", "split": "#17becf", "bridge": "#bcbd22", "oneway": "#ff7f0e",
          "loss": "#7f7f7f", "flap": "#aec7e8", "clock": "#2ca02c", "disk-full": "#393b79",
          "time-jump": "#98df8a"}
_QUOTED = re.compile(r"'([^']+)'")


def timeline(log, t0: float, bucket_s: float = BUCKET_S) -> dict:
    """Per bucket of produce operations completed ok: count/s, mean and max latency (ms)."""
    buckets: dict[int, list[float]] = {}
    for op in log.operations():
        if op.f != "produce" or op.type != "ok":
            continue
        buckets.setdefault(int((op.end - t0) // bucket_s), []).append((op.end - op.start) * 1000)
    last = max(buckets, default=-1)
    series = []
    for b in range(last + 1):
        lat = buckets.get(b, [])
        series.append({"t": round(b * bucket_s, 3), "throughput": len(lat) / bucket_s,
                       "latency_mean_ms": round(sum(lat) / len(lat), 2) if lat else None,
                       "latency_max_ms": round(max(lat), 2) if lat else None})
    return {"bucket_s": bucket_s, "series": series}


def ops_involved(error: str, *histories, limit: int = 5) -> list[dict]:
    """The recorded operations an anomaly's message names (by the values it quotes)."""
    values = set(_QUOTED.findall(error))
    out = []
    for op in (op for h in histories for op in h.ops):
        if op.value in values:
            row = {k: getattr(op, k) for k in ("kind", "value", "partition", "process", "time")}
            row.update({k: getattr(op, k) for k in ("outcome", "offset", "error", "final", "epoch")
                        if hasattr(op, k)})
            out.append(row)
            if len(out) >= limit:
                break
    return out


def round_record(r) -> dict:
    ops = r.log.operations()
    counts: dict[str, int] = {}
    for op in ops:
        counts[f"{op.f}:{op.type}"] = counts.get(f"{op.f}:{op.type}", 0) + 1
    counts.update(r.counts)
    return {
        "round": r.round, "seed": r.seed, "ok": r.ok,
        "schedule": [dict(fault=s.fault, targets=list(s.targets), at=s.at, duration=s.duration)
                     for s in r.schedule],
        "windows": [{"start": round(a, 3), "end": round(b, 3), "label": label}
                    for a, b, label in r.windows],
        "operations": counts, "history_ops": len(r.history) + len(r.txn_history),
        "checkers": [{"name": c.name, "ok": c.ok,
                      "anomalies": [{"message": e, "ops": ops_involved(e, r.history, r.txn_history)}
                                    for e in c.errors[:20]],
                      "anomaly_count": len(c.errors)} for c in r.checks],
        "notes": r.notes, "timeline": timeline(r.log, r.started),
    }


def svg(record: dict, width: int = 900, panel: int = 110) -> str:
    """Two panels sharing the time axis: throughput on top, latency below; faults shaded."""
    series = record["timeline"]["series"]
    end = max([s["t"] for s in series] + [w["end"] for w in record["windows"]] + [1.0])
    left, top, gap = 60, 32, 30        # top: two rows of fault labels (overlapping ones alternate)

    height = top + 2 * panel + gap + 30
    x = lambda t: left + (width - left - 10) * t / end          # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="10">']
    for i, w in enumerate(record["windows"]):
        fault = w["label"].split("(")[0]
        parts.append(f'<rect class="fault" x="{x(w["start"]):.1f}" y="{top}" '
                     f'width="{max(1.0, x(w["end"]) - x(w["start"])):.1f}" '
                     f'height="{2 * panel + gap}" fill="{COLORS.get(fault, "#999")}" '
                     f'fill-opacity="0.18"><title>{html.escape(w["label"])}</title></rect>')
        parts.append(f'<text x="{x(w["start"]) + 2:.1f}" y="{top - 5 - 12 * (i % 2)}">'
                     f'{html.escape(fault)}</text>')
    panels = [("acked writes/s", [("throughput", "#2ca02c")], top),
              ("latency ms", [("latency_mean_ms", "#1f77b4"), ("latency_max_ms", "#d62728")],
               top + panel + gap)]
    for title, lines, y0 in panels:
        peak = max([s[k] or 0 for s in series for k, _ in lines] + [1])
        scale = lambda v: y0 + panel - panel * v / peak           # noqa: E731,B023
        parts.append(f'<rect x="{left}" y="{y0}" width="{width - left - 10}" height="{panel}" '
                     f'fill="none" stroke="#444"/>')
        parts.append(f'<text x="4" y="{y0 + 12}">{html.escape(title)}</text>'
                     f'<text x="4" y="{y0 + 26}">max {peak:.0f}</text>')
        for key, color in lines:
            pts = " ".join(f"{x(s['t'] + record['timeline']['bucket_s'] / 2):.1f},"
                           f"{scale(s[key]):.1f}" for s in series if s[key] is not None)
            parts.append(f'<polyline class="{key}" fill="none" stroke="{color}" '
                         f'stroke-width="1.2" points="{pts}"/>')
    for tick in range(0, int(math.ceil(end)) + 1, max(1, int(end // 10) or 1)):
        parts.append(f'<text x="{x(tick):.1f}" y="{height - 8}" text-anchor="middle">{tick}s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _checker_rows(record: dict) -> str:
    rows = []
    for c in record["checkers"]:
        verdict = "ok" if c["ok"] else f"FAIL ({c['anomaly_count']})"
        detail = "".join(f"<li>{html.escape(a['message'])}<pre>"
                         f"{html.escape(json.dumps(a['ops'], indent=None, default=str))}</pre></li>"
                         for a in c["anomalies"])
        rows.append(f'<tr class="{"ok" if c["ok"] else "bad"}"><td>{html.escape(c["name"])}</td>'
                    f'<td>{verdict}</td><td><ul>{detail}</ul></td></tr>')
    return "".join(rows)


def html_page(report: dict) -> str:
    head = (f"<h1>Raftka campaign: seed {report['seed']}, {len(report['rounds'])} rounds, "
            f"faults {html.escape(', '.join(report['faults']))}</h1>"
            f"<p>{report['summary']}</p>")
    if report.get("shrunk"):
        s = report["shrunk"]
        head += (f"<h2>Shrunk failing schedule (round {s['round']}, {s['runs']} re-runs)</h2>"
                 f"<pre>{html.escape(json.dumps(s['schedule']))}</pre>"
                 f"<p>reproduce: <code>{html.escape(s['command'])}</code></p>")
    body = []
    for r in report["rounds"]:
        body.append(f"<h2>Round {r['round']} (seed {r['seed']}): {'ok' if r['ok'] else 'ANOMALY'}"
                    f"</h2><p>schedule: {html.escape(', '.join(w['label'] for w in r['windows']) or 'none')}; "
                    f"operations: {html.escape(json.dumps(r['operations']))}</p>"
                    f"{svg(r)}<table border=1 cellpadding=3>{_checker_rows(r)}</table>"
                    + "".join(f"<p>note: {html.escape(n)}</p>" for n in r["notes"]))
    style = "<style>tr.bad{background:#fdd} pre{white-space:pre-wrap;margin:0}</style>"
    return f"<!doctype html><html><head><meta charset='utf-8'>{style}</head><body>{head}" \
           f"{''.join(body)}</body></html>"


def write(report: dict, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    j, h = out / "report.json", out / "report.html"
    j.write_text(json.dumps(report, indent=1, default=str))
    h.write_text(html_page(report))
    return j, h
