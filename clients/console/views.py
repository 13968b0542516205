"""Page dicts (data.py) -> HTML. Pure functions, no I/O.

Everything that comes from the cluster or the query string — topic and group names, client
ids, hosts, record keys, values and headers, error messages — goes through `esc` (or `cell`,
which calls it); only the fragments built here are `Html`. No inline scripts or styles: the
server's Content-Security-Policy allows only our own /static files, so even a missed escape
could not run script.
"""

from __future__ import annotations

import html
import time
from urllib.parse import urlencode


class Html(str):
    """A fragment built here, already safe to emit."""


def esc(value) -> Html:
    if isinstance(value, Html):
        return value
    return Html(html.escape("-" if value is None else str(value), quote=True))


def cell(value) -> Html:
    if isinstance(value, (list, tuple)):
        return esc(", ".join(str(v) for v in value))
    return esc(value)


def link(href: str, text) -> Html:
    return Html(f'<a href="{esc(href)}">{esc(text)}</a>')


def browse_href(topic: str, partition: int, **extra) -> str:
    return "/messages?" + urlencode({"topic": topic, "partition": partition, **extra})


def table(headers: list[str], rows: list[list], cls: str = "") -> Html:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>"
                   for row in rows)
    if not rows:
        body = f'<tr><td colspan="{len(headers)}" class="empty">none</td></tr>'
    return Html(f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead>'
                f'<tbody>{body}</tbody></table>')


def error_box(section: dict) -> Html:
    return Html(f'<p class="error">{esc(section["error"])}</p>')


NAV = [("/", "Overview"), ("/topics", "Topics"), ("/groups", "Consumer groups"),
       ("/charts", "Throughput"), ("/messages", "Messages"), ("/reassignments", "Reassignments")]


def page(title: str, path: str, body: str, scripts: tuple[str, ...] = ()) -> str:
    nav = "".join(f'<a href="{href}" class="{"active" if href == path else ""}">{name}</a>'
                  for href, name in NAV)
    tags = "".join(f'<script src="/static/{s}"></script>' for s in scripts)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)} · Raftka console</title>"
            '<link rel="stylesheet" href="/static/console.css">'
            '<script src="/static/errors.js"></script></head>'
            f'<body><header><span class="brand">Raftka</span><nav>{nav}</nav></header>'
            f'<main><h1>{esc(title)}</h1><pre id="js-errors" hidden></pre>{body}</main>'
            f'<footer>read-only · rendered {esc(time.strftime("%Y-%m-%d %H:%M:%S"))}</footer>'
            f"{tags}</body></html>")


def human_bytes(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# -- pages -----------------------------------------------------------------------------------------

def overview_page(d: dict) -> str:
    parts: list[str] = ["<h2>Metadata quorum</h2>"]
    q = d["quorum"]
    if "error" in q:
        parts.append(error_box(q))
    else:
        parts.append(Html(f'<p>Leader (active controller): <b class="leader">{esc(q["leader_id"])}'
                          f'</b>, epoch {esc(q["leader_epoch"])}, high watermark '
                          f'{esc(q["high_watermark"])}</p>'))
        rows = [[v["id"], "voter", "leader" if v["id"] == q["leader_id"] else "follower",
                 v["log_end_offset"], v["lag"]] for v in q["voters"]]
        rows += [[o["id"], "observer (broker)", "", o["log_end_offset"], o["lag"]]
                 for o in q["observers"]]
        parts.append(table(["NODE", "ROLE", "RAFT STATE", "POSITION", "LAG"], rows))
        parts.append(Html('<p class="muted">Voters\' positions are Raft log indexes (lag '
                          'against the leader); brokers\' are metadata offsets (lag against '
                          'the high watermark).</p>'))
    parts.append("<h2>Brokers</h2>")
    c = d["cluster"]
    if "error" in c:
        parts.append(error_box(c))
    else:
        parts.append(Html(f'<p>Cluster id {esc(c["cluster_id"])}; controller in metadata '
                          f'{esc(c["controller_id"])}</p>'))
        parts.append(table(["ID", "HOST", "PORT", "RACK", "STATE"],
                           [[b["id"], b["host"], b["port"], b["rack"],
                             Html(f'<span class="state-{esc(b["state"])}">{esc(b["state"])}'
                                  '</span>')] for b in c["brokers"]]))
    parts.append("<h2>Partitions</h2>")
    p = d["partitions"]
    parts.append(error_box(p) if "error" in p else table(
        ["TOPICS", "PARTITIONS", "UNDER-REPLICATED", "OFFLINE"],
        [[p["topics"], p["partitions"], p["under_replicated"], p["offline"]]]))
    return page("Cluster overview", "/", "".join(parts))


def topics_page(d: dict) -> str:
    parts: list[str] = []
    for b, err in sorted(d.get("log_dir_errors", {}).items()):
        parts.append(Html(f'<p class="error">broker {esc(b)}: sizes unknown ({esc(err)})</p>'))
    summary = [[link(f'#t-{t["name"]}', t["name"]), "yes" if t.get("internal") else "",
                len(t["partitions"]), t.get("messages"), human_bytes(t.get("size"))]
               for t in d["topics"]]
    parts.append(table(["TOPIC", "INTERNAL", "PARTITIONS", "MESSAGES", "SIZE (LEADERS)"],
                       summary))
    for t in d["topics"]:
        parts.append(Html(f'<h2 id="t-{esc(t["name"])}">{esc(t["name"])}</h2>'))
        if "error" in t:
            parts.append(error_box(t))
            continue
        rows = [[link(browse_href(t["name"], p["partition"]), p["partition"]),
                 p["leader"] if p["leader"] >= 0 else Html('<span class="bad">none</span>'),
                 p["leader_epoch"], p["replicas"],
                 Html(f'<span class="{"bad" if p["under_replicated"] else "ok"}">'
                      f'{cell(p["isr"])}</span>'),
                 p["offline"] or "", p["log_start_offset"], p["log_end_offset"],
                 human_bytes(p["size"]),
                 ", ".join(f"{r}: {human_bytes(s)}" for r, s in p["replica_sizes"].items())]
                for p in t["partitions"]]
        parts.append(table(["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "OFFLINE",
                            "START OFFSET", "END OFFSET", "SIZE", "SIZE PER REPLICA"], rows))
    return page("Topics", "/topics", "".join(parts))


def groups_page(d: dict) -> str:
    parts: list[str] = []
    if not d["groups"]:
        parts.append(Html('<p class="empty">No consumer groups.</p>'))
    for g in d["groups"]:
        parts.append(Html(f'<h2>{esc(g["group"])}</h2><p>state <b>{esc(g["state"])}</b>, '
                          f'type {esc(g.get("type"))}'))
        if "error" in g:
            parts.append(Html("</p>"))
            parts.append(error_box(g))
            continue
        parts.append(Html(f', assignor {esc(g["protocol"] or "-")}, coordinator '
                          f'{esc(g["coordinator"])}, total lag <b>{esc(g["lag"])}</b> '
                          f'message(s)</p>'))
        parts.append(table(["MEMBER", "INSTANCE", "CLIENT", "HOST", "ASSIGNMENT"],
                           [[m["member_id"], m["instance_id"], m["client_id"], m["host"],
                             m["assignment"]] for m in g["member_list"]]))
        parts.append(table(
            ["TOPIC", "PARTITION", "COMMITTED", "LOG END", "LAG (MESSAGES)", "LAG (SECONDS)",
             "OWNER"],
            [[p["topic"], link(browse_href(p["topic"], p["partition"],
                                           offset=p["current_offset"] or 0), p["partition"]),
              p["current_offset"], p["log_end_offset"], p["lag"], p.get("lag_seconds"),
              p["client_id"]] for p in g["partitions"]]))
    return page("Consumer groups", "/groups", "".join(parts))


def charts_page(interval_s: float) -> str:
    body = Html(
        '<p>Messages per second from log end offsets sampled every '
        f'{esc(interval_s)} s (client access only: the brokers\' /metrics are not used); '
        'latency is the round trip of that ListOffsets as the console sees it.</p>'
        '<h2>Throughput (messages/s)</h2><canvas id="throughput" width="900" height="260">'
        '</canvas><div id="legend" class="legend"></div>'
        '<h2>Latency (ms)</h2><canvas id="latency" width="900" height="200"></canvas>'
        '<p id="chart-status" class="muted">waiting for samples…</p>')
    return page("Throughput and latency", "/charts", body, ("charts.js",))


def browse_form(q: dict) -> Html:
    def field(name, label, value, kind="text"):
        return (f'<label>{esc(label)} <input type="{kind}" name="{name}" '
                f'value="{esc("" if value is None else value)}"></label>')
    fmt = q.get("format") or "text"
    options = "".join(f'<option value="{v}"{" selected" if v == fmt else ""}>{v}</option>'
                      for v in ("text", "hex"))
    return Html('<form method="get" action="/messages" class="browse">'
                + field("topic", "Topic", q.get("topic"))
                + field("partition", "Partition", q.get("partition", 0), "number")
                + field("offset", "From offset", q.get("offset"), "number")
                + field("timestamp", "or from timestamp (ms)", q.get("timestamp"), "number")
                + field("count", "Count", q.get("count", 20), "number")
                + f'<label>Show as <select name="format">{options}</select></label>'
                '<button type="submit">Read</button></form>')


def messages_page(q: dict, d: dict | None, error: str | None = None) -> str:
    parts: list[str] = [browse_form(q)]
    if error:
        parts.append(Html(f'<p class="error">{esc(error)}</p>'))
    if d is not None:
        parts.append(Html(f'<p>{esc(d["topic"])}-{esc(d["partition"])}: log start offset '
                          f'{esc(d["log_start_offset"])}, high watermark '
                          f'{esc(d["high_watermark"])}; reading from offset '
                          f'{esc(d["from_offset"])}, {len(d["records"])} record(s) shown</p>'))
        rows = [[r["offset"], _when(r["timestamp"]) + f' ({r["timestamp_type"]})',
                 Html(f'<code>{esc(r["key"])}</code>'), Html(f'<code>{esc(r["value"])}</code>'),
                 Html("<br>".join(f'<code>{esc(k)}={esc(v)}</code>' for k, v in r["headers"]))]
                for r in d["records"]]
        parts.append(table(["OFFSET", "TIMESTAMP", "KEY", "VALUE", "HEADERS"], rows, "records"))
        if d["records"]:
            nxt = dict(q, offset=d["records"][-1]["offset"] + 1, timestamp="")
            nxt = {k: v for k, v in nxt.items() if v not in (None, "")}
            parts.append(link("/messages?" + urlencode(nxt), "next page →"))
    return page("Message browser", "/messages", "".join(parts))


def _when(ms: int) -> str:
    if ms is None or ms < 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def reassignments_page(d: dict) -> str:
    parts: list[str] = ["<h2>Reassignments in progress</h2>"]
    m = d["moves"]
    if "error" in m:
        parts.append(error_box(m))
    else:
        rows = [[r["topic"], r["partition"], r["replicas"], r["adding"], r["removing"],
                 r["leader"], human_bytes(r["leader_size"]),
                 ", ".join(f"{b}: {_progress(s, r['leader_size'])}"
                           for b, s in r["adding_sizes"].items())]
                for r in m["reassignments"]]
        parts.append(table(["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING", "LEADER",
                            "LEADER SIZE", "ADDING REPLICAS (COPIED)"], rows))
    parts.append("<h2>Balancer</h2>")
    b = d["balancer"]
    if "error" in b:
        parts.append(error_box(b))
    else:
        parts.append(Html(f'<p>Decision: <b class="balancer-state">{esc(b["state"])}</b> — '
                          f'{esc(b["reason"])}</p><p class="muted">enable={esc(b["enabled"])} '
                          f'max.moves={esc(b["max_moves"])} threshold={esc(b["threshold"])} '
                          f'disk.threshold.percent={esc(b["disk_threshold_percent"])}; '
                          f'{esc(b["moves_in_progress"])} move(s) in progress</p>'))
        parts.append(table(["BROKER", "REPLICAS", "PREFERRED LEADERS", "DISK"],
                           [[x["id"], x["replicas"], x["preferred_leaders"],
                             human_bytes(x["disk_bytes"])] for x in b["brokers"]]))
        if b["moves"]:
            parts.append(table(["TOPIC", "PARTITION", "TARGET", "WHY"],
                               [[x["topic"], x["partition"], x["target"], x["why"]]
                                for x in b["moves"]]))
    return page("Reassignments and balancer", "/reassignments", "".join(parts))


def _progress(size, leader_size) -> str:
    if size is None:
        return "-"
    if not leader_size:
        return human_bytes(size)
    return f"{human_bytes(size)} ({min(100.0, 100 * size / leader_size):.0f}%)"


def error_page(status: int, message: str) -> str:
    return page(f"Error {status}", "", error_box({"error": message}))
