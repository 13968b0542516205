"""Consumer groups on a live cluster with unmodified clients (issue #7, first slice).

Three consumers of one group share a 6-partition topic; every record is processed at least once,
the final assignments are disjoint and cover all partitions, committed offsets are what was
processed, and a new consumer of the group resumes from them.
"""

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster
from wire.messages.api_keys import ApiKey

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("groups"))
    c.start()
    yield c
    c.stop()


def _topic(cluster, name, n=600):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(name, 6, 3)]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": "lz4"})
    for i in range(n):
        p.produce(name, str(i).encode(), key=str(i).encode())
    assert p.flush(30) == 0


def _confluent_member(cluster, topic, group, seconds, seen, assignments, name, first_at=None,
                      until=None, live=None):
    """Consume and commit after each record for `seconds`, or until `until()` is true; `live`
    (if given) holds every member's assignment as of its last poll."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000})
    c.subscribe([topic])
    end = time.time() + seconds
    while time.time() < end:
        if live is not None:
            live[name] = {tp.partition for tp in c.assignment()}
        if until is not None and until():
            break
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        seen.append((m.partition(), m.offset()))
        if first_at is not None:
            first_at.setdefault("t", time.time())
        try:
            c.commit(m, asynchronous=False)       # commit after processing
        except KafkaException:
            pass        # refused during a rebalance: the record comes again (at least once)
    assignments[name] = {tp.partition for tp in c.assignment()}
    c.close()


def test_three_confluent_consumers_share_partitions_and_commit(cluster):
    topic, group = "grp-confluent", "g-confluent"
    _topic(cluster, topic)
    seen, assignments, live, settled = [], {}, {}, {}
    done = threading.Lock(), threading.Event()

    def until():
        # every record read, and the group settled with all three members holding partitions
        # (the last records can be read while a rebalance is still handing them out)
        with done[0]:
            if not done[1].is_set() and len(set(seen)) >= 600 and len(live) == 3 \
                    and all(live.values()) \
                    and sorted(p for parts in live.values() for p in parts) == list(range(6)):
                settled.update(live)
                done[1].set()
        return done[1].is_set()
    threads = [threading.Thread(target=_confluent_member,
                                args=(cluster, topic, group, 90, seen, assignments, f"c{i}"),
                                kwargs={"until": until, "live": live})
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 600                       # every record at least once
    owned = [p for parts in settled.values() for p in parts]
    assert sorted(owned) == list(range(6)), (settled, live)   # disjoint, complete, all three
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    committed = c.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
    c.close()
    highest = {}
    for p, o in seen:
        highest[p] = max(highest.get(p, -1), o)
    assert {tp.partition: tp.offset for tp in committed} == {p: o + 1 for p, o in highest.items()}


def test_group_resumes_from_committed_offsets(cluster):
    topic, group = "grp-resume", "g-resume"
    _topic(cluster, topic, n=300)
    seen, assignments = [], {}
    _confluent_member(cluster, topic, group, 60, seen, assignments, "first",
                      until=lambda: len(set(seen)) >= 300)
    assert len(set(seen)) == 300
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(300, 360):
        p.produce(topic, str(i).encode(), partition=i % 6)
    p.flush(30)
    later = []
    _confluent_member(cluster, topic, group, 30, later, assignments, "second",
                      until=lambda: len(later) >= 60)
    assert len(later) == 60 and not set(later) & set(seen)   # only what came after the commit


def test_kafka_python_and_aiokafka_groups(cluster):
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer
    topic = "grp-python"
    _topic(cluster, topic, n=120)
    kp = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id="g-kp",
                       auto_offset_reset="earliest", enable_auto_commit=False,
                       consumer_timeout_ms=8000)
    got = [m.value for m in kp]
    kp.commit()
    kp.close()
    assert len(set(got)) == 120

    async def aio():
        c = AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id="g-aio",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        values = []
        try:
            end = time.time() + 15
            while len(values) < 120 and time.time() < end:
                batch = await c.getmany(timeout_ms=500)
                for msgs in batch.values():
                    values += [m.value for m in msgs]
            await c.commit()
        finally:
            await c.stop()
        return values
    assert len(set(asyncio.run(aio()))) == 120


def test_coordinator_sigkill_keeps_committed_offsets(cluster):
    """F13: kill -9 the group coordinator's broker during a steady group: a new coordinator
    takes over, committed offsets are all there, no committed record is delivered again and none
    is lost; the group is consuming again within session timeout + 5 s."""
    from partition_server.group.coordinator import OFFSETS_TOPIC, partition_for
    topic, group = "grp-f13", "g-f13"
    _topic(cluster, topic, n=300)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    seen, assignments = [], {}
    _confluent_member(cluster, topic, group, 60, seen, assignments, "before",
                      until=lambda: len(set(seen)) >= 300)
    assert len(set(seen)) == 300
    md = admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
    coordinator = md.partitions[partition_for(group, len(md.partitions))].leader
    cluster.kill(f"broker-{coordinator}")
    try:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(300, 360):
            p.produce(topic, str(i).encode(), partition=i % 6)
        assert p.flush(30) == 0
        t0 = time.time()
        after, first = [], {}
        _confluent_member(cluster, topic, group, 6 + 5 + 6, after, assignments, "after", first)
    finally:
        cluster.restart_broker(coordinator)
    offsets = {(p, o) for p, o in after}
    assert len(offsets) == 60, f"expected exactly the 60 new records, got {len(offsets)}"
    assert not (offsets & set(seen))             # nothing committed came back
    assert first["t"] - t0 < 6 + 5             # session timeout + 5 s


def _wait_offsets_topic_fully_replicated(cluster, timeout_s=60):
    """Wait (up to timeout_s, without failing) until every __consumer_offsets partition has a
    leader and its full ISR of 3: an earlier test SIGKILLs and restarts a broker, and the caller
    is about a steady cluster."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    settled = time.time() + timeout_s
    while time.time() < settled:
        try:
            parts = admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"].partitions
            if parts and all(len(p.isrs) == 3 and p.leader >= 0 for p in parts.values()):
                break
        except KafkaException:
            pass
        time.sleep(0.5)


def _kip848_all_hold_partitions(assignments):
    """Settled = all three members hold partitions and all 6 are held (m0 holding all 6 while the
    others are still empty is the moment before the revocation, not the settled state)."""
    return (len(assignments) == 3 and all(assignments.values())
            and sum(map(len, assignments.values())) == 6)


def _kip848_member(cluster, topic, group, name, seen, assignments, lock, done, stop):
    """One group.protocol=consumer member: consume with commit after processing until all 600
    records were seen (by any member), then keep polling so the group reconciles, record this
    member's assignment, and stay in the group until `stop` (or 30 s)."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    end = time.time() + 90
    while time.time() < end and not done.is_set():
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        with lock:
            seen.append((m.partition(), m.offset()))
            if len(set(seen)) >= 600:
                done.set()
        c.commit(m, asynchronous=False)
    # settle: keep polling until every member holds partitions (the group reconciles)
    settle = time.time() + 30
    while time.time() < settle and not _kip848_all_hold_partitions(assignments):
        c.poll(0.2)
        assignments[name] = {tp.partition for tp in c.assignment()}
    assignments[name] = {tp.partition for tp in c.assignment()}
    stop.wait(30)
    c.close()


async def _kip848_classic_join(cluster, group):
    """A classic JoinGroup for the KIP-848 group, sent straight to its coordinator; returns the
    response (the caller expects INCONSISTENT_GROUP_PROTOCOL)."""
    from clients.connection import BrokerConnection
    from wire.messages.index_generated import REQUESTS
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    from partition_server.group.coordinator import partition_for
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
        "__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    node = md.partitions[partition_for(group, len(md.partitions))].leader
    port = int(cluster.bootstrap.split(",")[node].rsplit(":", 1)[1])
    conn = BrokerConnection(host, port)
    await conn.connect()
    try:
        jg = REQUESTS[ApiKey.JOIN_GROUP]
        return await conn.request(jg(group_id=group, session_timeout_ms=10000,
                                     rebalance_timeout_ms=10000, member_id="",
                                     protocol_type="consumer", protocols=[
                                         jg.JoinGroupRequestProtocol(name="range", metadata=b"")]), 5)
    finally:
        await conn.aclose()


def _kip848_produce_and_resume(cluster, topic, group):
    """Write 30 more records, then a restarted KIP-848 member of the group reads (up to 40 s);
    returns the (partition, offset) pairs it got."""
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(600, 630):
        p.produce(topic, str(i).encode(), partition=i % 6)
    p.flush(30)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    later, end = [], time.time() + 40
    while len(later) < 30 and time.time() < end:
        m = c.poll(0.2)
        if m is not None and not m.error():
            later.append((m.partition(), m.offset()))
    c.close()
    return later


def test_kip848_consumer_protocol_with_librdkafka(cluster):
    """group.protocol=consumer (KIP-848): the coordinator assigns (uniform assignor) through
    ConsumerGroupHeartbeat; three librdkafka members share the partitions with commit after
    processing, every record is processed, the final assignments are disjoint and complete, a
    classic JoinGroup for the same group is refused, and a restarted member resumes from the
    committed offsets."""
    import trio

    from wire.errors import ErrorCode
    topic, group = "grp-kip848", "g-kip848"
    # The previous test SIGKILLs and restarts a broker; this one is about a steady cluster (the
    # failover path is test_live_group_failover.py::test_kip848_group_keeps_its_epochs_*): wait
    # until every __consumer_offsets partition has its full ISR again.
    _wait_offsets_topic_fully_replicated(cluster)
    _topic(cluster, topic)
    seen, assignments, lock = [], {}, threading.Lock()
    done = threading.Event()
    stop = threading.Event()
    threads = [threading.Thread(target=_kip848_member,
                                args=(cluster, topic, group, f"m{i}", seen, assignments, lock,
                                      done, stop))
               for i in range(3)]
    for t in threads:
        t.start()
    done.wait(90)
    deadline = time.time() + 40
    # wait for the settled state (see _kip848_all_hold_partitions)
    while time.time() < deadline and not _kip848_all_hold_partitions(assignments):
        time.sleep(0.2)
    snapshot = {k: set(v) for k, v in assignments.items()}
    joined = trio.run(_kip848_classic_join, cluster, group)
    stop.set()
    for t in threads:
        t.join()
    assert len(set(seen)) == 600
    owned = sorted(p for parts in snapshot.values() for p in parts)
    assert owned == list(range(6)) and all(snapshot.values()), snapshot
    assert joined.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    later = _kip848_produce_and_resume(cluster, topic, group)
    assert len(later) == 30 and not set(later) & set(seen)     # resumed from the commits


def _produce_while(cluster, topic, start, n, pace_s=0.005):
    """Write n records (value = sequence number) at a steady pace from a background thread."""
    def run():
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(start, start + n):
            p.produce(topic, str(i).encode(), key=str(i).encode())
            p.poll(0)
            time.sleep(pace_s)
        assert p.flush(30) == 0
    t = threading.Thread(target=run)
    t.start()
    return t


def _is_settled(current, members):
    parts = [p for ps in list(current.values()) for p in ps]
    return len(current) == members and all(current.values()) and sorted(parts) == list(range(6))


def _settled(current, members, timeout_s=30):
    """The members' assignments once the group has settled: every member owns partitions and
    together they own each partition once (read while they all still run)."""
    end = time.time() + timeout_s
    while time.time() < end and not _is_settled(current, members):
        time.sleep(0.1)
    return {k: set(v) for k, v in current.items()}


def _check_generations(history, partitions=6):
    """history: [(generation marker, member, frozenset(partitions))]: within one generation no
    partition has two owners."""
    by_gen: dict = {}
    for gen, member, parts in history:
        owners = by_gen.setdefault(gen, {})
        for p in parts:
            assert owners.setdefault(p, member) == member, f"partition {p} twice in generation {gen}"


def test_kafka_python_three_members_join_and_leave(cluster):
    """kafka-python 3.x: three members while a producer writes; one leaves and a new one joins
    midway; commit after processing each poll; every record processed at least once, one owner
    per partition per generation, and the final members own all partitions once."""
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    topic, group, total = "grp-kp3", "g-kp3", 900
    _topic(cluster, topic, n=0)
    seen, history, final = [], [], {}
    lock = threading.Lock()
    stop = {}

    def member(name, seconds):
        c = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          session_timeout_ms=6000, heartbeat_interval_ms=500)

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                pass

            def on_partitions_assigned(self, assigned):
                gen = c._coordinator._generation.generation_id
                with lock:
                    history.append((gen, name, frozenset(tp.partition for tp in assigned)))
        c.subscribe([topic], listener=Listener())
        end = time.time() + seconds
        while time.time() < end and not stop.get("all"):
            batch = c.poll(timeout_ms=200)
            with lock:
                for msgs in batch.values():
                    seen.extend((m.partition, m.offset) for m in msgs)
            if batch:
                try:
                    c.commit()
                except Exception:  # noqa: BLE001 - refused during a rebalance: redelivered later
                    pass
            final[name] = {tp.partition for tp in c.assignment()}
        final.pop(name, None)
        c.close()
    producer = _produce_while(cluster, topic, 0, total)
    threads = [threading.Thread(target=member, args=(f"kp{i}", 120 if i else 8)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(4)
    late = threading.Thread(target=member, args=("kp-late", 120))
    late.start()
    producer.join()
    end = time.time() + 60
    while len(set(seen)) < total and time.time() < end:
        time.sleep(0.2)
    settled = _settled(final, 3)
    stop["all"] = True
    for t in threads + [late]:
        t.join()
    assert len(set(seen)) == total                        # every record at least once
    _check_generations(history)
    assert sorted(p for parts in settled.values() for p in parts) == list(range(6)), settled


async def _aio_member(cluster, topic, group, name, seconds, stop, seen, history, final):
    """One aiokafka member for `seconds` or until `stop`: record each assignment with its
    generation in `history`, commit after each non-empty poll (a refusal during a rebalance means
    redelivery), keep `final[name]` as its current assignment and drop it on leaving."""
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    c = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group,
                         auto_offset_reset="earliest", enable_auto_commit=False,
                         session_timeout_ms=6000, heartbeat_interval_ms=500)

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            pass

        async def on_partitions_assigned(self, assigned):
            gen = c._coordinator.generation
            history.append((gen, name, frozenset(tp.partition for tp in assigned)))
    c.subscribe([topic], listener=Listener())
    await c.start()
    try:
        end = time.time() + seconds
        while time.time() < end and not stop.is_set():
            batch = await c.getmany(timeout_ms=200)
            for msgs in batch.values():
                seen.extend((m.partition, m.offset) for m in msgs)
            if batch:
                try:
                    await c.commit()
                except Exception:  # noqa: BLE001 - refused during a rebalance
                    pass
            final[name] = {tp.partition for tp in c.assignment()}
    finally:
        final.pop(name, None)
        await c.stop()


async def _aio_produce_and_resume(cluster, topic, group, total):
    """Write 30 more records, then a restarted aiokafka member of the group reads (up to 30 s);
    returns the (partition, offset) pairs it got."""
    from aiokafka import AIOKafkaConsumer
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(total, total + 30):
        p.produce(topic, str(i).encode(), partition=i % 6)
    p.flush(30)
    c = AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                         auto_offset_reset="earliest", enable_auto_commit=False)
    await c.start()
    got, end = [], time.time() + 30
    try:
        while len(got) < 30 and time.time() < end:
            for msgs in (await c.getmany(timeout_ms=300)).values():
                got.extend((m.partition, m.offset) for m in msgs)
    finally:
        await c.stop()
    return got


def test_aiokafka_three_members_join_and_leave(cluster):
    """The same with aiokafka: three members, one leaves and a new one joins while a producer
    writes; at least once, one owner per partition per generation, complete final ownership;
    then a restarted member resumes from the committed offsets."""
    import asyncio
    topic, group, total = "grp-aio3", "g-aio3", 900
    _topic(cluster, topic, n=0)
    seen, history, final = [], [], {}

    def member(name, seconds, stop):
        return _aio_member(cluster, topic, group, name, seconds, stop, seen, history, final)

    async def main():
        stop = asyncio.Event()
        producer = _produce_while(cluster, topic, 0, total)
        tasks = [asyncio.create_task(member(f"aio{i}", 120 if i else 8, stop)) for i in range(3)]
        await asyncio.sleep(4)
        tasks.append(asyncio.create_task(member("aio-late", 120, stop)))
        end = time.time() + 90
        while (len(set(seen)) < total or producer.is_alive()) and time.time() < end:
            await asyncio.sleep(0.2)
        end = time.time() + 30
        while time.time() < end and not _is_settled(final, 3):
            await asyncio.sleep(0.1)
        settled.update({k: set(v) for k, v in final.items()})
        stop.set()
        await asyncio.gather(*tasks)
        producer.join()
    settled: dict = {}
    asyncio.run(main())
    assert len(set(seen)) == total
    _check_generations(history)
    assert sorted(p for parts in settled.values() for p in parts) == list(range(6)), settled
    later = asyncio.run(_aio_produce_and_resume(cluster, topic, group, total))
    assert len(later) == 30 and not set(later) & set(seen)
