"""`raftka cluster balance --status`: what the controller's balancer decides now, and why
(issue 19 item 6b).

The balancer is a pure function (metadata_quorum/controller/balancer.py); this command runs the
same function on what any client can read — usable brokers and partitions (replicas, ISR,
leader) from Metadata, moves in progress from ListPartitionReassignments, the balancer's
settings from DescribeConfigs of a broker (the dynamic cluster-wide values) — so it prints the
decision the controller takes on its next rebalance tick (every 5 s), without a new controller
API. Metadata may lag the controller by a heartbeat: right after a change, the previous decision
can show. Disk bytes come from DescribeLogDirs: each partition's size on its leader, as the
controller hears it from the leaders' load reports — those are sent every
`raftka.load.report.interval.ms` and only when a size moved by ≥ 1 MiB or 5 %, so near a
threshold the two can differ. If a leader does not answer DescribeLogDirs, sizes count as
unknown, as on the controller before every broker reported.

Exit code 0 whatever the decision (a status, not a check).
"""

from __future__ import annotations

from clients.admin import AdminClient, ConfigResource, ConfigResourceType
from clients.cli.output import EXIT_OK, add_connection_args, print_json, print_table
from clients.cluster import TopicPartition
from metadata_quorum.controller import balancer
from wire.errors import KafkaError


def register(cs) -> None:
    b = cs.add_parser("balance", help="the balancer's current decision (--status)",
                      description="Show what the controller's balancer decides now and why: "
                      "balanced, disabled, moves in flight, waiting for a broker, or the moves "
                      "it starts.")
    b.add_argument("--status", action="store_true", required=True,
                   help="show the decision (the only action: the balancer runs by itself "
                        "when raftka.balancer.enable is true)")
    add_connection_args(b)


async def inputs(admin: AdminClient):
    """(usable brokers {id: rack}, {TopicPartition: balancer.Part}, balancer.Settings)."""
    cluster = await admin.describe_cluster()
    brokers = {b["id"]: b["rack"] for b in cluster["brokers"]}
    names = await admin.list_topics(include_internal=True)
    moves = await admin.list_partition_reassignments()
    parts = {}
    for name, desc in (await admin.describe_topics(names)).items():
        if isinstance(desc, KafkaError):
            continue                    # deleted meanwhile
        for p in desc.partitions:
            tp = TopicPartition(name, p.partition)
            m = moves.get(tp)
            replicas = tuple(p.replicas) if m is None else \
                tuple(x for x in m.replicas if x not in m.removing_replicas)
            parts[tp] = balancer.Part(replicas, tuple(p.isr), p.leader, m is not None,
                                      tuple(m.removing_replicas) if m is not None else ())
    return brokers, parts, await settings(admin, brokers)


async def leader_sizes(admin: AdminClient, brokers, parts) -> dict | None:
    """{TopicPartition: bytes on its leader}, or None if a broker did not answer."""
    answers = await admin.describe_replica_log_dirs(sorted(brokers))
    sizes = {}
    for tp, p in parts.items():
        on_leader = answers.get(p.leader)
        if p.leader in brokers and not isinstance(on_leader, dict):
            return None
        if isinstance(on_leader, dict) and tp in on_leader:
            sizes[tp] = on_leader[tp][0]
    return sizes


async def settings(admin: AdminClient, brokers) -> balancer.Settings:
    """The dynamic cluster-wide settings, as a broker reports them (any broker: the value is
    cluster-wide)."""
    for b in sorted(brokers):
        res = ConfigResource(ConfigResourceType.BROKER, str(b))
        entries = (await admin.describe_configs([res])).get(res)
        if isinstance(entries, list):
            return balancer.Settings.from_configs(
                {e.name: e.value for e in entries if e.value is not None})
    return balancer.Settings()


async def status_dict(admin: AdminClient) -> dict:
    """The decision and its inputs, as `--output json` prints them (the web console shows the
    same)."""
    brokers, parts, s = await inputs(admin)
    d = balancer.decide(brokers, parts, s, await leader_sizes(admin, brokers, parts))
    disk = dict(d.disk_bytes)
    return {"state": d.state, "reason": d.reason, "enabled": s.enabled,
            "max_moves": s.max_moves, "threshold": s.threshold,
            "disk_threshold_percent": s.disk_percent,
            "disk_min_skew_bytes": s.disk_min_skew,
            "moves_in_progress": sum(p.moving for p in parts.values()),
            "brokers": [{"id": b, "replicas": rc, "preferred_leaders": pc,
                         "disk_bytes": disk.get(b)}
                        for b, rc, pc in d.replica_counts],
            "moves": [{"topic": tp.topic, "partition": tp.partition, "target": list(target),
                       "why": why} for tp, target, why in d.moves]}


async def status(admin: AdminClient, args) -> int:
    st = await status_dict(admin)
    if args.output == "json":
        print_json(st)
        return EXIT_OK
    print(f"balancer: {st['state']} — {st['reason']}")
    print(f"settings: enable={str(st['enabled']).lower()} max.moves={st['max_moves']} "
          f"threshold={st['threshold']} disk.threshold.percent={st['disk_threshold_percent']} "
          f"disk.min.skew.bytes={st['disk_min_skew_bytes']}; "
          f"{st['moves_in_progress']} moves in progress")
    print_table(["BROKER", "REPLICAS", "PREFERRED LEADERS", "DISK BYTES"],
                [(b["id"], b["replicas"], b["preferred_leaders"],
                  "-" if b["disk_bytes"] is None else b["disk_bytes"]) for b in st["brokers"]])
    for m in st["moves"]:
        print(f"  {m['topic']}-{m['partition']} -> {m['target']} ({m['why']})")
    return EXIT_OK
