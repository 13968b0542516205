"""All-topic Metadata answers in-process, before and after the per-topic answer cache (issue 17,
partition_server/handlers/metadata_cache.py), side by side in one run.

    python3 bench/metadata_answers.py                       # 1k, 10k, 30k partitions
    python3 bench/metadata_answers.py --partitions 30000 --per-topic 1

A synthetic image (3 brokers, RF 3, topics of `--per-topic` partitions) is built by replaying
records, as a broker does. "old" is the handler as it was before the cache (kept below as the
reference): every struct built and every partition encoded on each request. "new" is the broker's
handler with its cache: "cold" is the first request (every piece built and encoded), "warm" a
later one at the same image, "1 change" the request after one partition of one topic changed
leader (one piece rebuilt); "ACL" runs both through the authorization filter for a principal
allowed on every topic by one prefixed ACL. Each figure is the median of `--runs` timings of handler + encoding
(`encode_chunks(12, lenient=True)`, what the connection does), in ms; the last column is old/new.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402

from common.topic_configs import validate_topic_name  # noqa: E402
from metadata_quorum import records as r  # noqa: E402
from metadata_quorum.image import MetadataImage  # noqa: E402
from partition_server.handlers.cluster import CLUSTER_ID, handle_metadata, live_brokers  # noqa: E402
from partition_server.handlers.context import HandlerContext  # noqa: E402
from partition_server.security import authorizer as A  # noqa: E402
from partition_server.security.enforce import authorize_and_call  # noqa: E402
from common.network import ClientContext  # noqa: E402
from wire.connection import Request  # noqa: E402
from wire.errors import ErrorCode  # noqa: E402
from wire.messages.api_keys import ApiKey  # noqa: E402
from wire.messages.index_generated import REQUESTS, RESPONSES  # noqa: E402

MD = RESPONSES[ApiKey.METADATA]


def old_handler(image, req, broker_id=0):
    """handle_metadata before the cache (all-topic and named requests, no auto-creation)."""
    brokers = live_brokers(image)
    requested = req.body.topics
    names = sorted(image.topics) if requested is None else [t.name for t in requested]
    topics = []
    for name in names:
        topic = image.topics.get(name)
        if topic is None:
            code = ErrorCode.INVALID_TOPIC_EXCEPTION if validate_topic_name(name) else \
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(MD.MetadataResponseTopic(error_code=code, name=name))
            continue
        live = {b.broker_id for b in brokers}
        parts = [MD.MetadataResponsePartition(
            error_code=ErrorCode.NONE if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            partition_index=p.partition_id, leader_id=p.leader, leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
            offline_replicas=[x for x in p.replicas if x not in live])
            for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id)]
        topics.append(MD.MetadataResponseTopic(error_code=0, name=name, topic_id=topic.topic_id,
                                               is_internal=name.startswith("__"),
                                               partitions=parts))
    controller = broker_id if not brokers else brokers[0].broker_id
    return MD(brokers=[MD.MetadataResponseBroker(node_id=b.broker_id, host=b.host, port=b.port,
                                                 rack=b.rack) for b in brokers],
              cluster_id=CLUSTER_ID, controller_id=controller, topics=topics)


def build_image(partitions: int, per_topic: int) -> tuple[MetadataImage, list]:
    recs: list = [r.RegisterBrokerRecord(b, "inc", 1, "127.0.0.1", 9092 + b, None, False, False,
                                         ()) for b in range(3)]
    ids = []
    for t in range(max(1, partitions // per_topic)):
        tid = uuid.UUID(int=t + 1)
        ids.append(tid)
        recs.append(r.TopicRecord(f"topic-{t:05d}", tid))
        for p in range(per_topic):
            reps = [(p + i) % 3 for i in range(3)]
            recs.append(r.PartitionRecord(tid, p, reps, reps, reps[0], 0, 0, (), (), 0, (), ()))
    return MetadataImage.from_records(recs, len(recs) - 1), ids


class Broker:
    """What HandlerContext reads from a broker, for handle_metadata (the rest is None)."""

    def __init__(self, image):
        self.image, self.authorizer, self.broker_id = image, None, 0
        self.config = {"auto.create.topics.enable": False}

    def __getattr__(self, name):
        return None


def context(broker) -> HandlerContext:
    return HandlerContext.of(broker)


def request(topics=None) -> Request:
    return Request(ApiKey.METADATA, 12, 1, "bench", None, REQUESTS[ApiKey.METADATA](topics=topics), 0)


def timed(fn, runs: int, setup=lambda: None) -> float:
    times = []
    for _ in range(runs):
        setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(partitions: int, per_topic: int, runs: int) -> dict:
    image, ids = build_image(partitions, per_topic)
    broker = Broker(image)
    hctx = context(broker)

    def old():
        return old_handler(broker.image, request()).encode_chunks(12, lenient=True)

    def new():
        return trio.run(handle_metadata, hctx, request()).encode_chunks(12, lenient=True)

    assert old() == new(), "the cached answer differs from the uncached one"
    out = {"old": timed(old, runs), "warm": timed(new, runs)}
    # with ACLs: a principal allowed on every topic by one prefixed ACL (the answer is filtered
    # topic by topic after the handler, so the joined all-topic bytes are not used)
    az = A.Authorizer([A.Acl(A.TOPIC, "topic-", A.PREFIXED, "User:app", "*", A.DESCRIBE,
                             A.ALLOW)])
    ctx = ClientContext("127.0.0.1:1", "PLAIN", "127.0.0.1", "User:app")

    async def old_handler_async(req):
        return old_handler(broker.image, req)

    def old_acl():
        return trio.run(authorize_and_call, az, ctx, request(), old_handler_async
                        ).encode_chunks(12, lenient=True)

    def new_acl():
        return trio.run(authorize_and_call, az, ctx, request(),
                        lambda q: handle_metadata(hctx, q)).encode_chunks(12, lenient=True)
    assert old_acl() == new_acl() == old()
    out["old_acl"], out["new_acl"] = timed(old_acl, runs), timed(new_acl, runs)

    def empty_cache():
        hctx.metadata_cache = type(hctx.metadata_cache)()
    out["cold"] = timed(new, max(3, runs // 3), empty_cache)
    changes = iter(range(1, 1_000_000))

    def change_one():           # not timed: the broker applies records anyway
        n = next(changes)
        broker.image = broker.image.apply(broker.image.offset + 1, r.PartitionChangeRecord(
            ids[n % len(ids)], 0, leader=n % 3))
    out["change"] = timed(new, runs, change_one)
    assert old() == new()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", default="1000,10000,30000")
    ap.add_argument("--per-topic", type=int, default=100)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    print(f"all-topic Metadata v12, handler + encoding, median ms ({args.per_topic} "
          f"partitions per topic, 3 brokers, RF 3)")
    print(f"{'partitions':>10} {'old':>9} {'new cold':>9} {'new warm':>9} {'1 change':>9} "
          f"{'old/warm':>9} {'old/1 change':>12} {'ACL old':>9} {'ACL new':>9} {'ratio':>6}")
    for n in (int(x) for x in args.partitions.split(",")):
        m = measure(n, args.per_topic, args.runs)
        print(f"{n:>10,} {m['old']:>9.2f} {m['cold']:>9.2f} {m['warm']:>9.2f} "
              f"{m['change']:>9.2f} {m['old'] / m['warm']:>9.1f} "
              f"{m['old'] / m['change']:>12.1f} {m['old_acl']:>9.2f} {m['new_acl']:>9.2f} "
              f"{m['old_acl'] / m['new_acl']:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
