"""Our producer vs confluent-kafka's, same cluster, same run (issue #8).

A local 3-broker cluster; one topic per run (6 partitions, RF 1). Each client writes N keyless
records of 100 B with acks=1, linger.ms 5, no compression (and a second setting with acks=all
and idempotence on RF 3), rounds alternating between the clients; we report records/s (send of
the first record to the acknowledgement of the last) and the ratio ours / confluent-kafka
(median of the rounds). Our producer runs through its async API (`send_nowait`, falling back to
`send` under back-pressure) — what `raftka perf produce` does.

    python3 bench/clients_producer.py [--records 300000] [--rounds 3]

First runs (2026-11-23, 200k records, 3 rounds, medians; a 2-core machine shared with other
jobs at load average 4-16, so absolute figures are low and noisy, ratios less so):

| setting | raftka rec/s | confluent-kafka rec/s | ratio |
|---|---|---|---|
| acks=1 RF1 | 26,386 | 78,258 | 0.34 |
| acks=all idempotent RF3 | 30,955 | 46,686 | 0.66 |

(an earlier run of the same commit range gave 0.17 and 0.64 with confluent-kafka at 142k.)
The goal of 0.5 is met where the broker round trip dominates (acks=all, RF 3) and missed by
about 2x where the client's own CPU does: every record is encoded in Python on the event loop
(`send_nowait` measured alone at 4.5-7 µs per record at load average ~5 and ~20 µs at ~16,
plus ~1.4 µs to complete each delivery future: the record encoder, future and callbacks), while librdkafka encodes in C on its own threads. Latency p50/p99
are dominated by queueing: the loop hands over all records as fast as it can.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clients.cli.perf import produce as confluent_produce  # noqa: E402
from clients.cli.perf import produce_raftka  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402

SETTINGS = {
    "acks=1 RF1": {"acks": "1", "replication_factor": 1, "extra": {"enable.idempotence": False}},
    "acks=all idempotent RF3": {"acks": "all", "replication_factor": 3, "extra": {}},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--record-size", type=int, default=100)
    args = ap.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    with LiveCluster(Path(tempfile.mkdtemp(prefix="bench-producer-"))) as cluster:
        bs = cluster.bootstrap
        for name, s in SETTINGS.items():
            res = results.setdefault(name, {"raftka": [], "confluent": []})
            for r in range(args.rounds):
                for client in ("confluent", "raftka"):
                    topic = f"bench-{client}-{name.split()[0].replace('=', '')}-{r}"
                    if client == "raftka":
                        out = produce_raftka(bs, topic, args.records, args.record_size,
                                             acks=s["acks"], linger_ms=5, batch_size=1 << 18,
                                             partitions=6,
                                             replication_factor=s["replication_factor"],
                                             progress=False, extra=s["extra"])
                    else:
                        out = confluent_produce(bs, topic, args.records, args.record_size,
                                                acks=s["acks"], linger_ms=5,
                                                partitions=6,
                                                replication_factor=s["replication_factor"],
                                                progress=False)
                    assert out["errors"] == 0, out
                    res[client].append(out["records_per_s"])
                    print(f"{name} round {r} {client}: {out['records_per_s']:,} rec/s "
                          f"p50 {out['p50_ms']} ms p99 {out['p99_ms']} ms", flush=True)
    print("\n| setting | raftka rec/s | confluent-kafka rec/s | ratio |")
    print("|---|---|---|---|")
    summary = {}
    for name, res in results.items():
        ours, theirs = statistics.median(res["raftka"]), statistics.median(res["confluent"])
        summary[name] = round(ours / theirs, 3)
        print(f"| {name} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f} |")
    print(json.dumps({"ratio": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
