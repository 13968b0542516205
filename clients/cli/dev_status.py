"""`raftka dev status`: the nodes (from the supervisor), whether each is ready and why not (its
own `/health/ready` JSON: partition_server/health.py, metadata_quorum/health.py), and the
cluster's own view of itself — the quorum leader (DescribeQuorum) and each partition's leader
and ISR (Metadata) — in one screen.

The cluster is asked through a broker the supervisor says is running (a killed or paused one
would only time out), with a deadline: a cluster that does not answer is shown as such. Each
running node's health endpoint is asked at once, with a deadline of its own (a paused node
answers nothing: "no answer").
"""

from __future__ import annotations

import concurrent.futures
import json
import urllib.error
import urllib.request

import trio

from clients.connection import BrokerConnection
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

CLUSTER_TIMEOUT_S = 8
HEALTH_TIMEOUT_S = 2


def _running_brokers(nodes: list[dict], bootstrap: str) -> list[tuple[str, int]]:
    addresses = bootstrap.split(",")
    out = []
    for n in nodes:
        if n["role"] == "broker" and n["state"] == "running":
            bid = int(n["name"].split("-", 1)[1])
            if bid < len(addresses):
                host, _, port = addresses[bid].rpartition(":")
                out.append((host, int(port)))
    return out


async def _ask(host: str, port: int, security) -> dict:
    from clients.cli.quorum import describe
    quorum = await describe(host, port, security)
    conn = BrokerConnection(host, port, "raftka-dev-status", security=security)
    await conn.connect()
    try:
        meta = await conn.request(REQUESTS[ApiKey.METADATA](topics=None), 12)
    finally:
        await conn.aclose()
    parts = [{"topic": t.name, "partition": p.partition_index, "leader": p.leader_id,
              "isr": sorted(p.isr_nodes)}
             for t in meta.topics if not t.name.startswith("__")
             for p in t.partitions]
    parts.sort(key=lambda p: (p["topic"], p["partition"]))
    return {"quorum_leader": quorum["leader_id"], "partitions": parts}


def cluster_view(nodes: list[dict], bootstrap: str,
                 client_properties: str | None = None) -> dict:
    """{"quorum_leader", "partitions", "cluster_error"}: what a running broker says
    (`raftka dev --secure`: as the super user of its client.properties)."""
    from common.security import PLAINTEXT, ClientSecurity
    security = PLAINTEXT
    if client_properties:
        from common.properties import load_properties
        security = ClientSecurity.from_properties(load_properties(client_properties))
    errors = []
    for host, port in _running_brokers(nodes, bootstrap):
        try:
            view = trio.run(_with_deadline, host, port, security)
            return view | {"cluster_error": None}
        except Exception as exc:     # noqa: BLE001 — shown to the user, then the next broker
            errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
    return {"quorum_leader": None, "partitions": [],
            "cluster_error": "; ".join(errors) or "no broker is running"}


async def _with_deadline(host: str, port: int, security) -> dict:
    with trio.fail_after(CLUSTER_TIMEOUT_S):
        return await _ask(host, port, security)


def ask_health(url: str) -> dict:
    """{"ready": True|False|None, "reasons": [...]} from a node's /health/ready (200 or 503 with
    its JSON); None and why when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT_S) as r:
            body = r.read()
    except urllib.error.HTTPError as exc:       # 503: not ready, and the body says why
        body = exc.read()
    except (OSError, ValueError) as exc:
        return {"ready": None, "reasons": [f"no answer from {url}: {exc}"]}
    try:
        answer = json.loads(body)
        return {"ready": bool(answer["ready"]), "reasons": list(answer.get("reasons") or [])}
    except (ValueError, KeyError, TypeError):
        return {"ready": None, "reasons": [f"not a health answer from {url}"]}


def health_view(nodes: list[dict], urls: dict[str, str]) -> list[dict]:
    """`nodes` with "health" added to each running node that has a health URL."""
    asked = {n["name"]: urls[n["name"]] for n in nodes
             if n["state"] == "running" and n["name"] in urls}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(asked))) as pool:
        answers = dict(zip(asked, pool.map(ask_health, asked.values())))
    return [n | {"health": answers[n["name"]]} if n["name"] in answers else n for n in nodes]


def _readiness(node: dict) -> str:
    health = node.get("health")
    if health is None:
        return ""
    if health["ready"]:
        return "ready"
    why = "; ".join(health["reasons"])
    return f"not ready: {why}" if health["ready"] is False else why


def format_status(view: dict) -> str:
    """The compact table (pure: unit-tested)."""
    lines = [f"{'NODE':<17} {'ROLE':<10} {'PID':>7}  {'STATE':<8}  READY"]
    for n in view["nodes"]:
        state = n["state"] if n["state"] != "exited" else f"exited (code {n['exit_code']})"
        lines.append(f"{n['name']:<17} {n['role']:<10} {n['pid']:>7}  {state:<8}  "
                     f"{_readiness(n)}".rstrip())
    if view.get("cluster_error"):
        lines.append(f"cluster: not answering ({view['cluster_error']})")
        return "\n".join(lines)
    leader = view["quorum_leader"]
    lines.append(f"quorum leader: controller-{leader}" if leader is not None and leader >= 0
                 else "quorum leader: none")
    if not view["partitions"]:
        lines.append("partitions: none (no topics yet)")
        return "\n".join(lines)
    lines.append(f"{'PARTITION':<24} {'LEADER':>6}  ISR")
    for p in view["partitions"]:
        name = f"{p['topic']}-{p['partition']}"
        lines.append(f"{name:<24} {p['leader']:>6}  {','.join(map(str, p['isr']))}")
    return "\n".join(lines)
