"""Big metadata on real processes: large operations as metadata transactions, restarts after
Raft log compaction, controllers restarted one at a time (issue 17, items 1 and 2).

Every controller's state is read directly with FetchSnapshot (the image it serves brokers) and
compared record for record once their end offsets agree.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import trio

from clients.cli.dev import CONTROLLER_IDS
from clients.connection import BrokerConnection, ConnectionClosed
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import decode_record
from metadata_quorum.tests.test_failover import Quorum
from partition_server.testing import LiveCluster
from wire.errors import DecodeError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import decode_batch, iter_batches

pytestmark = pytest.mark.live

NET_ERRORS = (ConnectionClosed, OSError, DecodeError, trio.TooSlowError)


async def _request(port: int, message, version: int, timeout: float = 30.0):
    conn = BrokerConnection("127.0.0.1", port)
    try:
        await conn.connect(timeout_s=5)
        return await conn.request(message, version, timeout_s=timeout)
    finally:
        await conn.aclose()


async def controller_state(port: int) -> tuple[int, MetadataImage]:
    """(end offset, image) that the controller at `port` serves brokers as its snapshot."""
    cls = REQUESTS[ApiKey.FETCH_SNAPSHOT]
    req = cls(replica_id=-1, max_bytes=256 << 20, topics=[cls.TopicSnapshot(
        name="__cluster_metadata", partitions=[cls.PartitionSnapshot(partition=0)])])
    resp = await _request(port, req, 1)
    part = resp.topics[0].partitions[0]
    records = [decode_record(rec.value)
               for h in iter_batches(bytes(part.unaligned_records or b""))
               for rec in decode_batch(h.bytes()).records]
    end = part.snapshot_id.end_offset
    return end, MetadataImage.from_records(records, end - 1)


async def identical_images(ports: list[int], deadline_s: float = 60) -> MetadataImage:
    """Wait until every controller reports the same end offset, then assert equal images."""
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        try:
            states = [await controller_state(p) for p in ports]
        except NET_ERRORS as exc:
            last = exc
            await trio.sleep(0.2)
            continue
        ends = {end for end, _ in states}
        last = ends
        if len(ends) == 1:
            first = states[0][1]
            for _, img in states[1:]:
                assert img.same_state(first), "controllers at the same offset hold different images"
            assert not first.in_transaction
            return first
        await trio.sleep(0.2)
    raise AssertionError(f"controllers never agreed on an end offset: {last}")


async def register_brokers(q: Quorum, ids=(0, 1, 2)) -> None:
    """Registered (and fenced) brokers, so explicit assignments can name them."""
    br = REQUESTS[ApiKey.BROKER_REGISTRATION]
    for bid in ids:
        msg = br(broker_id=bid, cluster_id="raftka", incarnation_id=uuid.uuid4(),
                 listeners=[br.Listener(name="PLAINTEXT", host="127.0.0.1", port=1 + bid)])
        await _until_ok(q, msg, 4, lambda resp: [resp.error_code])


async def _until_ok(q: Quorum, msg, version: int, codes, deadline_s: float = 60):
    """Send to every controller in turn until one answers all items with NONE."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for i in list(q.procs):
            try:
                resp = await _request(q.port(i), msg, version)
            except NET_ERRORS:
                continue
            got = set(codes(resp))
            if got == {0}:
                return resp
            # NOT_CONTROLLER, or REQUEST_TIMED_OUT: a commit that took over 5 s is in doubt
            assert got <= {0, 7, 41}, f"unexpected error codes {got}"
        await trio.sleep(0.1)
    raise AssertionError("no controller committed the request")


def _create(topics: dict[str, int], rf: int = 3):
    ct = REQUESTS[ApiKey.CREATE_TOPICS]
    return ct(timeout_ms=30000, topics=[ct.CreatableTopic(
        name=name, num_partitions=-1, replication_factor=-1,
        assignments=[ct.CreatableReplicaAssignment(
            partition_index=p, broker_ids=[(p + k) % 3 for k in range(rf)]) for p in range(n)])
        for name, n in topics.items()])


async def test_ten_thousand_partitions_in_one_create_topics_and_in_many(tmp_path):
    """10,000 partitions in one CreateTopics (~1 MB of records: many Raft entries, one metadata
    transaction) and 10,000 more over five requests: every controller ends with the same image,
    holding all of them. pysyncobj garbled entries this large before they were bounded."""
    q = Quorum(tmp_path)
    try:
        q.start_all()
        await register_brokers(q)
        await _until_ok(q, _create({"huge": 10_000}), 7, lambda r: [t.error_code for t in r.topics])
        for batch in range(5):
            topics = {f"t{batch}-{i}": 100 for i in range(20)}
            await _until_ok(q, _create(topics), 7, lambda r: [t.error_code for t in r.topics])
        image = await identical_images([q.port(i) for i in range(3)])
        assert len(image.topics["huge"].partitions) == 10_000
        assert sum(len(t.partitions) for t in image.topics.values()) == 20_000
        assert image.topics["huge"].partitions[9_999].replicas == (0, 1, 2)
        assert image.skipped == 0
    finally:
        q.stop_all()


def _alter_configs(topics: list[str], round_: int):
    ia = REQUESTS[ApiKey.INCREMENTAL_ALTER_CONFIGS]
    keys = ("retention.ms", "delete.retention.ms", "segment.ms", "retention.bytes", "segment.bytes")
    return ia(resources=[ia.AlterConfigsResource(
        resource_type=2, resource_name=t, configs=[
            ia.AlterableConfig(name=k, config_operation=0, value=str(10_000_000 + round_ * 10 + j))
            for j, k in enumerate(keys)]) for t in topics])


async def _wait_for(predicate, what: str, deadline_s: float = 60):
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await trio.sleep(0.2)


async def _all_led(bootstrap_port: int, topics: set[str], deadline_s: float = 90) -> None:
    md = REQUESTS[ApiKey.METADATA]
    deadline = time.monotonic() + deadline_s
    missing = topics
    while time.monotonic() < deadline:
        try:
            resp = await _request(bootstrap_port, md(topics=None), 12)
        except NET_ERRORS:
            await trio.sleep(0.2)
            continue
        led = {t.name for t in resp.topics
               if t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions)}
        missing = topics - led
        if not missing:
            return
        await trio.sleep(0.2)
    raise AssertionError(f"{len(missing)} topics not led, e.g. {sorted(missing)[:3]}")


async def test_cluster_restarts_after_raft_compaction_and_many_records(tmp_path):
    """> 20,000 metadata records and Raft log compaction on every controller (low thresholds),
    then a full restart (every controller loads its Raft snapshot, brokers load the metadata
    snapshot: the stream tail is short), then each controller restarted in turn: the cluster is
    ready each time, every topic is led, and all controllers hold the same image."""
    overrides = {"raftka.controller.raft.log.compaction.min.entries": "20",
                 "raftka.controller.stream.tail.records": "2000"}
    cluster = LiveCluster(Path(tmp_path), overrides)
    layout = cluster.layout
    ports = [layout.controller_port(i) for i in range(3)]
    broker_port = layout.broker_port(0)
    names = [f"c{i}" for i in range(400)]
    try:
        cluster.start(timeout_s=90)
        q = _ControllersOf(layout)
        for i in range(0, 400, 100):
            await _until_ok(q, _create({n: 1 for n in names[i:i + 100]}, rf=1), 7,
                            lambda r: [t.error_code for t in r.topics])
        await _until_ok(q, _create({"wide": 2_000}, rf=1), 7,
                        lambda r: [t.error_code for t in r.topics])
        for round_ in range(10):                               # 10 x 2,000 config records
            await _until_ok(q, _alter_configs(names, round_), 1,
                            lambda r: [x.error_code for x in r.responses])
        before = await identical_images(ports)
        assert before.offset > 20_000
        dumps = [layout.data_dir / f"controller-{cid}" / "raft.dump" for cid in CONTROLLER_IDS]
        await _wait_for(lambda: all(d.exists() for d in dumps), "Raft log compaction everywhere")
        # one more write after the compaction: the restart replays snapshot + journal
        await _until_ok(q, _create({"after-compaction": 1}, rf=1), 7,
                        lambda r: [t.error_code for t in r.topics])
        expected = set(names) | {"wide", "after-compaction"}

        cluster.stop()
        cluster.start(timeout_s=120)
        await _all_led(broker_port, expected)
        after = await identical_images(ports)
        assert after.offset > before.offset
        assert expected <= set(after.topics)
        assert after.topic_config("c399")["retention.ms"] == str(10_000_000 + 90)

        for i in range(3):
            cluster.restart_controller(i, timeout_s=60)
            await _until_ok(q, _create({f"while-{i}": 1}, rf=1), 7,
                            lambda r: [t.error_code for t in r.topics])
            expected.add(f"while-{i}")
            image = await identical_images(ports)
            assert expected <= set(image.topics)
        await _all_led(broker_port, expected)
    finally:
        cluster.stop()


class _ControllersOf(Quorum):
    """The controller ports of a LiveCluster, for `_until_ok`."""

    def __init__(self, layout):
        self.layout = layout
        self.procs = {i: None for i in range(3)}
