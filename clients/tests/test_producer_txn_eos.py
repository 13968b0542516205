"""Exactly-once consume-transform-produce with OUR transactional producer (blocking facade)
across SIGKILLs of brokers (soak: `@pytest.mark.slow`, RAFTKA_SOAK=1).

Loop: read up to 25 input records from the committed positions (read_committed), write one
output per input and the next positions in one transaction, commit. Meanwhile a broker is
SIGKILLed and restarted, twice (first the transaction coordinator, then an output leader, at a
quarter and at half of the input committed; the last quarter of the input comes after them). A
failed round is aborted (or, when fenced / out of time, the producer is replaced) and redone
from the committed positions. Checked: every input's output is readable exactly once with
read_committed, and the committed positions end at the input's end.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError as CKError
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTP
from confluent_kafka.admin import AdminClient, NewTopic

from clients.sync import SyncProducer
from clients.producer.transaction_manager import State
from partition_server.testing import LiveCluster
from wire.errors import KafkaError

pytestmark = [pytest.mark.live, pytest.mark.slow]

N_INPUT = 2000
PARTS = 2


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("ptxn-eos"),
                    {"transaction.state.log.num.partitions": "3",
                     "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    c.start()
    yield c
    c.stop()


def _committed(cluster, group, topic):
    c = CKConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                    "isolation.level": "read_committed"})
    try:
        got = c.committed([CKTP(topic, p) for p in range(PARTS)], timeout=30)
    finally:
        c.close()
    return {t.partition: max(t.offset, 0) for t in got}


def _read(cluster, topic, positions, limit):
    c = CKConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4()}",
                    "isolation.level": "read_committed", "enable.auto.commit": False,
                    "enable.partition.eof": True})
    c.assign([CKTP(topic, p, positions[p]) for p in range(PARTS)])
    out, eof, end = [], set(), time.time() + 10
    while len(out) < limit and len(eof) < PARTS and time.time() < end:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == CKError._PARTITION_EOF:
                eof.add(m.partition())
            continue
        out.append((m.partition(), m.offset(), m.value().decode()))
    c.close()
    return out


def _produce_input(live, src, first, end):
    ck = CKProducer({"bootstrap.servers": live.bootstrap})
    for i in range(first, end):
        ck.produce(src, f"{i}".encode(), partition=i % PARTS)
    assert ck.flush(30) == 0


def _wait_progress(live, group, src, at_least, deadline):
    while sum(_committed(live, group, src).values()) < at_least:
        assert time.time() < deadline, f"fewer than {at_least} inputs committed in time"
        time.sleep(0.05)


def _kill_coordinator_then_output_leader(live, tid, src, dst, group, faults):
    """The chaos thread, paced by the application's progress rather than by the clock (its
    rounds got fast enough to finish all the input between two timed faults): SIGKILL and
    restart the transaction coordinator of `tid` once a quarter of the input is committed,
    then the leader of dst-0 at half, while three quarters are there to transform; then
    produce the last quarter, so work is left after the faults. Each victim is appended to
    `faults`."""
    deadline = time.time() + 180
    for step in range(2):
        _wait_progress(live, group, src, N_INPUT // (4 if step == 0 else 2), deadline)
        probe = SyncProducer(live.bootstrap, {})
        try:
            if step == 0:
                victim = probe._loop.run(probe._producer.cluster.find_coordinator, tid, 1)
            else:
                probe._loop.run(probe._producer.cluster.refresh_metadata, [dst])
                victim = probe._producer.cluster.leader_for(dst, 0)
        finally:
            probe.close()
        faults.append(victim)
        live.restart_broker(victim)
    _produce_input(live, src, N_INPUT * 3 // 4, N_INPUT)


def _transform_in_one_transaction(p, src, dst, group, positions, batch):
    """One output per input and the next positions, in one transaction (raises KafkaError)."""
    p.begin_transaction()
    nxt = dict(positions)
    for part, off, value in batch:
        p.send(dst, f"out-{value}", partition=int(value) % PARTS)
        nxt[part] = off + 1
    p.send_offsets_to_transaction({(src, q): o for q, o in nxt.items()}, group)
    p.commit_transaction()


def _abort_or_replace(p, new_producer):
    """After a failed round: abort if the transaction is abortable and the abort works (same
    producer); otherwise the producer is replaced (returned)."""
    state = p._producer.transaction_state
    if state in (State.IN_TRANSACTION, State.ABORTABLE_ERROR):
        try:
            p.abort_transaction()
            return p
        except KafkaError:
            pass
    # fenced, or stuck committing/aborting: a new instance takes over the id (fencing
    # this one; the coordinator completes or aborts what it left)
    try:
        p.close(5)
    except Exception:  # noqa: BLE001 - the old instance may be unusable
        pass
    return new_producer()


def _transform_until_done(live, chaos, new_producer, src, dst, group):
    """The application loop (up to 240 s): redo rounds from the committed positions until all
    input is committed and the chaos thread is over. Returns (failed rounds, input left to do
    when the faults ended)."""
    p = new_producer()
    failures = rounds = work_after_faults = 0
    deadline = time.time() + 240
    while time.time() < deadline:
        positions = _committed(live, group, src)
        if sum(positions.values()) >= N_INPUT and not chaos.is_alive():
            break
        rounds += 1
        if not chaos.is_alive() and not work_after_faults:
            work_after_faults = N_INPUT - sum(positions.values())
        batch = _read(live, src, positions, 25)
        if not batch:
            time.sleep(0.2)
            continue
        try:
            _transform_in_one_transaction(p, src, dst, group, positions, batch)
        except KafkaError:
            failures += 1
            p = _abort_or_replace(p, new_producer)
    p.close()
    return failures, work_after_faults


def test_consume_transform_produce_exactly_once_across_broker_kills(live):
    src, dst, group, tid = "eos-in", "eos-out", "eos-group", "eos-app"
    admin = AdminClient({"bootstrap.servers": live.bootstrap})
    for fut in admin.create_topics([NewTopic(src, PARTS, 3), NewTopic(dst, PARTS, 3)]).values():
        fut.result(30)
    _produce_input(live, src, 0, N_INPUT * 3 // 4)

    conf = {"transactional.id": tid, "transaction.timeout.ms": 15000, "linger.ms": 5,
            "request.timeout.ms": 8000, "delivery.timeout.ms": 30000, "max.block.ms": 30000}

    def new_producer():
        p = SyncProducer(live.bootstrap, conf)
        p.init_transactions()
        return p

    faults = []
    t = threading.Thread(target=_kill_coordinator_then_output_leader,
                         args=(live, tid, src, dst, group, faults), daemon=True)
    t.start()

    failures, work_after_faults = _transform_until_done(live, t, new_producer, src, dst, group)
    t.join(120)
    assert len(faults) == 2
    assert work_after_faults > 0, "the work was over before the faults ended"
    assert _committed(live, group, src) == {q: N_INPUT // PARTS for q in range(PARTS)}
    outs = [v for _, _, v in _read(live, dst, {q: 0 for q in range(PARTS)}, 10 * N_INPUT)]
    assert sorted(outs) == sorted(f"out-{i}" for i in range(N_INPUT)), \
        (len(outs), len(set(outs)), failures)
