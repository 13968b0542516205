"""What each console page shows, gathered with our admin client and consumer, as plain dicts
(the JSON API returns them as they are; views.py renders them).

Every call here is a read: Metadata, DescribeCluster, DescribeQuorum, ListOffsets,
DescribeLogDirs, ListGroups/DescribeGroups/OffsetFetch, ListPartitionReassignments,
DescribeConfigs and Fetch. A section the user's principal may not read (ACLs) becomes
{"error": "..."} in its place, so the rest of the page still shows.
"""

from __future__ import annotations

import time

import trio

from clients.admin import EARLIEST, LATEST, AdminClient
from clients.cluster import TopicPartition
from clients.errors import ClientError
from wire.errors import ErrorCode, KafkaError

MAX_BROWSE = 200          # records one message-browser request may return
LAG_SECONDS_PARTITIONS = 64   # partitions whose lag age one groups page reads at most
FAILURES = (KafkaError, ClientError, OSError)


def failure(exc: BaseException) -> dict:
    return {"error": f"{type(exc).__name__}: {exc}"}


async def guarded(coro_fn, *args):
    """The section's dict, or {"error": ...} when the cluster refused or failed it."""
    try:
        return await coro_fn(*args)
    except FAILURES as exc:
        return failure(exc)


# -- cluster overview ------------------------------------------------------------------------------

async def quorum(admin: AdminClient) -> dict:
    """DescribeQuorum with each node's lag. Voters' positions are Raft log indexes (the
    controllers' own numbering), so a voter's lag is against the leader's position; observers
    (brokers) count metadata offsets, so theirs is against the high watermark."""
    q = await admin.describe_quorum()
    leader = next((v["log_end_offset"] for v in q["voters"] if v["id"] == q["leader_id"]), -1)
    for rows, ref in ((q["voters"], leader), (q["observers"], q["high_watermark"])):
        for row in rows:
            known = row["log_end_offset"] >= 0 and ref >= 0
            row["lag"] = max(0, ref - row["log_end_offset"]) if known else None
    return q


async def brokers(admin: AdminClient) -> dict:
    c = await admin.describe_cluster(include_fenced=True)
    rows = [dict(b, state="unfenced") for b in c["brokers"]]
    rows += [dict(b, state="fenced") for b in (c.get("fenced_brokers") or [])]
    return {"cluster_id": c["cluster_id"], "controller_id": c["controller_id"],
            "brokers": sorted(rows, key=lambda b: b["id"])}


async def overview(admin: AdminClient) -> dict:
    parts = await guarded(partition_health, admin)
    return {"quorum": await guarded(quorum, admin), "cluster": await guarded(brokers, admin),
            "partitions": parts}


async def partition_health(admin: AdminClient) -> dict:
    """Counts an operator looks at first: under-replicated and offline (leaderless)."""
    names = await admin.list_topics(include_internal=True)
    total = under = offline = 0
    for desc in (await admin.describe_topics(names)).values():
        if isinstance(desc, KafkaError):
            continue
        for p in desc.partitions:
            total += 1
            under += len(p.isr) < len(p.replicas)
            offline += p.leader < 0
    return {"topics": len(names), "partitions": total, "under_replicated": under,
            "offline": offline}


# -- topics ----------------------------------------------------------------------------------------

async def topics(admin: AdminClient, include_internal: bool = True) -> dict:
    """Every topic's partitions: leader, replicas, ISR, offsets and the size on each replica."""
    names = await admin.list_topics(include_internal=include_internal)
    descs = await admin.describe_topics(names)
    led = [TopicPartition(n, p.partition) for n, d in descs.items()
           if not isinstance(d, KafkaError) for p in d.partitions if p.leader >= 0]
    starts, ends = await _offsets(admin, led)
    broker_ids = sorted({r for d in descs.values() if not isinstance(d, KafkaError)
                         for p in d.partitions for r in p.replicas})
    sizes = await admin.describe_replica_log_dirs(broker_ids) if broker_ids else {}
    out = []
    for name in names:
        d = descs[name]
        if isinstance(d, KafkaError):
            out.append({"name": name, "error": str(d), "partitions": []})
            continue
        parts = [_partition_row(name, p, starts, ends, sizes) for p in d.partitions]
        out.append({"name": name, "internal": d.is_internal, "topic_id": d.topic_id,
                    "partitions": parts,
                    "size": sum(p["size"] or 0 for p in parts),
                    "messages": sum(p["messages"] or 0 for p in parts)})
    unreadable = {b: str(v) for b, v in sizes.items() if not isinstance(v, dict)}
    return {"topics": out, "log_dir_errors": unreadable}


async def _offsets(admin: AdminClient, tps: list[TopicPartition]):
    if not tps:
        return {}, {}
    try:
        starts = await admin.list_offsets({tp: EARLIEST for tp in tps})
        ends = await admin.list_offsets({tp: LATEST for tp in tps})
    except FAILURES:
        return {}, {}          # shown as unknown ("-"); sizes and ISR still show
    return starts, ends


def _partition_row(topic: str, p, starts: dict, ends: dict, sizes: dict) -> dict:
    tp = TopicPartition(topic, p.partition)
    start = starts.get(tp, (None,))[0]
    end = ends.get(tp, (None,))[0]
    replica_sizes = {}
    for r in p.replicas:
        on = sizes.get(r)
        replica_sizes[r] = on[tp][0] if isinstance(on, dict) and tp in on else None
    return {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr), "offline": list(p.offline),
            "log_start_offset": start, "log_end_offset": end,
            "messages": (end - start) if start is not None and end is not None else None,
            "size": replica_sizes.get(p.leader), "replica_sizes": replica_sizes,
            "under_replicated": len(p.isr) < len(p.replicas)}


# -- consumer groups -------------------------------------------------------------------------------

async def groups(admin: AdminClient, props: dict) -> dict:
    """Each group's state, members and per-partition lag in messages (high watermark minus
    committed offset, as `raftka groups describe`) and in seconds: the age of the next record
    the group has not consumed, read with an assigned consumer (0 when caught up) — the same
    meaning as the brokers' raftka_consumer_group_lag_seconds."""
    from clients.cli.groups import describe_group
    out = []
    for g in await admin.list_groups():
        try:
            d = await describe_group(admin, g.group_id)
        except FAILURES as exc:
            out.append({"group": g.group_id, "state": g.state, "type": g.type, **failure(exc)})
            continue
        d["type"] = g.type
        d["member_list"] = await _members(admin, g.group_id)
        d["lag"] = sum(p["lag"] or 0 for p in d["partitions"])
        out.append(d)
    budget = LAG_SECONDS_PARTITIONS
    for g in out:              # one read per group: two groups may sit at different offsets
        budget -= await _add_lag_seconds(props, g.get("partitions", []), budget)
    return {"groups": out}


async def _members(admin: AdminClient, group: str) -> list[dict]:
    desc = (await admin.describe_groups([group]))[group]
    if isinstance(desc, KafkaError):
        return []
    return [{"member_id": m.member_id, "instance_id": m.group_instance_id,
             "client_id": m.client_id, "host": m.host,
             "assignment": [f"{t}-{p}" for t, p in sorted(m.assignment)]} for m in desc.members]


async def _add_lag_seconds(props: dict, rows: list[dict], budget: int) -> int:
    """Sets each row's "lag_seconds" (None: unknown); returns how many partitions it read."""
    wanted = {}
    for row in rows:
        row["lag_seconds"] = 0.0 if row["lag"] == 0 else None
        if row["lag"] and len(wanted) < budget:
            wanted[TopicPartition(row["topic"], row["partition"])] = row["current_offset"]
    if not wanted:
        return 0
    try:
        first = await first_records(props, wanted, timeout_s=5)
    except FAILURES:
        return len(wanted)     # ages unknown ("-"), lag in messages still shown
    now_ms = time.time() * 1000
    for row in rows:
        rec = first.get(TopicPartition(row["topic"], row["partition"]))
        if rec is not None and row["lag"]:
            row["lag_seconds"] = round(max(0.0, now_ms - rec.timestamp) / 1000, 3)
    return len(wanted)


# -- records ---------------------------------------------------------------------------------------

def consumer_props(props: dict) -> dict:
    """The user's properties for an assigned, never-committing consumer (no group)."""
    out = {k: v for k, v in props.items() if k not in ("group.id", "group.instance.id")}
    out.update({"enable.auto.commit": False, "auto.offset.reset": "earliest",
                "client.id": props.get("client.id", "raftka-console")})
    return out


async def first_records(props: dict, starts: dict[TopicPartition, int], timeout_s: float) -> dict:
    """{tp: the first record at or after the offset} for the partitions that have one."""
    from clients.consumer import Consumer
    got: dict = {}
    async with Consumer(props["bootstrap.servers"], consumer_props(props)) as c:
        c.assign(list(starts))
        for tp, off in starts.items():
            c.seek(tp, off)
        with trio.move_on_after(timeout_s):
            while len(got) < len(starts):
                for r in await c.poll(500):
                    tp = TopicPartition(r.topic, r.partition)
                    got.setdefault(tp, r)
                    c.pause([tp])
    return got


class BadRequest(ValueError):
    """A query the console cannot run (shown as HTTP 400 with this message)."""


def browse_query(params: dict[str, str]) -> dict:
    """The message browser's query string, checked: topic, partition, offset or timestamp
    (ms), count (1..MAX_BROWSE) and format (text | hex)."""
    topic = params.get("topic", "")
    if not topic:
        raise BadRequest("choose a topic")
    q = {"topic": topic, "format": params.get("format", "text") or "text"}
    if q["format"] not in ("text", "hex"):
        raise BadRequest("format must be text or hex")
    for key, default, low, high in (("partition", 0, 0, 1 << 31), ("count", 20, 1, MAX_BROWSE)):
        raw = params.get(key) or str(default)
        try:
            q[key] = int(raw)
        except ValueError:
            raise BadRequest(f"{key} must be a whole number, got {raw!r}") from None
        if not low <= q[key] <= high:
            raise BadRequest(f"{key} must be between {low} and {high}")
    offset, ts = params.get("offset") or "", params.get("timestamp") or ""
    if offset and ts:
        raise BadRequest("give an offset or a timestamp, not both")
    q["offset"] = q["timestamp"] = None
    for key, raw in (("offset", offset), ("timestamp", ts)):
        if raw:
            try:
                q[key] = int(raw)
            except ValueError:
                raise BadRequest(f"{key} must be a whole number, got {raw!r}") from None
            if q[key] < 0:
                raise BadRequest(f"{key} must not be negative")
    return q


def show_bytes(data: bytes | None, fmt: str) -> str | None:
    if data is None:
        return None
    if fmt == "hex":
        return data.hex(" ")
    # invalid UTF-8 and control characters (NUL, ESC…) shown as \xNN, so nothing is invisible
    return data.decode("utf-8", "backslashreplace").translate(_CONTROL)


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7f] if chr(c) not in "\n\t"}


async def browse(admin: AdminClient, props: dict, q: dict) -> dict:
    """Up to q["count"] records of one partition from an offset (default: the log start) or
    the first at or after a timestamp; reads stop at the high watermark."""
    from clients.consumer import Consumer
    await _check_partition(admin, q["topic"], q["partition"])
    tp = TopicPartition(q["topic"], q["partition"])
    out = dict(q, records=[])
    async with Consumer(props["bootstrap.servers"], consumer_props(props)) as c:
        start = (await c.beginning_offsets([tp]))[tp]
        end = (await c.end_offsets([tp]))[tp]
        first = start if q["offset"] is None else max(q["offset"], start)
        if q["timestamp"] is not None:
            found = (await c.offsets_for_times({tp: q["timestamp"]})).get(tp)
            first = found[0] if found and found[0] >= 0 else end
        out.update(log_start_offset=start, high_watermark=end, from_offset=first)
        if first >= end:
            return out
        c.assign([tp])
        c.seek(tp, first)
        with trio.move_on_after(10):
            while len(out["records"]) < q["count"] and await c.position(tp) < end:
                out["records"] += [_record(r, q["format"]) for r in await c.poll(500)]
    del out["records"][q["count"]:]
    return out


async def _check_partition(admin: AdminClient, topic: str, partition: int) -> None:
    """Unknown (or forbidden) topics and partitions fail now, from metadata, rather than after
    the consumer's default.api.timeout.ms of waiting for a leader."""
    desc = (await admin.describe_topics([topic]))[topic]
    if isinstance(desc, KafkaError):
        raise desc
    if partition not in {p.partition for p in desc.partitions}:
        raise KafkaError(f"topic {topic!r} has no partition {partition} (it has "
                         f"{len(desc.partitions)})", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _record(r, fmt: str) -> dict:
    return {"offset": r.offset, "timestamp": r.timestamp,
            "timestamp_type": "LogAppendTime" if r.timestamp_type else "CreateTime",
            "key": show_bytes(r.key, fmt), "value": show_bytes(r.value, fmt),
            "headers": [[k, show_bytes(v, fmt)] for k, v in r.headers]}


# -- reassignments and the balancer ----------------------------------------------------------------

async def reassignments(admin: AdminClient) -> dict:
    """Moves in progress, each adding replica's size against the leader's (the progress
    `raftka reassign --verify` reports)."""
    moves = await admin.list_partition_reassignments()
    adding = sorted({b for m in moves.values() for b in m.adding_replicas})
    descs = await admin.describe_topics(sorted({tp.topic for tp in moves})) if moves else {}
    leaders = {}
    for name, d in descs.items():
        if not isinstance(d, KafkaError):
            leaders.update({TopicPartition(name, p.partition): p.leader for p in d.partitions})
    sizes = await admin.describe_replica_log_dirs(sorted(set(adding) | set(leaders.values())))
    rows = []
    for tp, m in sorted(moves.items()):
        def size(b, tp=tp):
            on = sizes.get(b)
            return on[tp][0] if isinstance(on, dict) and tp in on else None
        rows.append({"topic": tp.topic, "partition": tp.partition, "replicas": list(m.replicas),
                     "adding": list(m.adding_replicas), "removing": list(m.removing_replicas),
                     "leader": leaders.get(tp), "leader_size": size(leaders.get(tp)),
                     "adding_sizes": {b: size(b) for b in m.adding_replicas}})
    return {"reassignments": rows}


async def balance(admin: AdminClient) -> dict:
    from clients.cli.cluster_balance import status_dict
    return await status_dict(admin)


async def reassign_page(admin: AdminClient) -> dict:
    return {"moves": await guarded(reassignments, admin), "balancer": await guarded(balance, admin)}
