"""KIP-966 unclean recovery on a live cluster: a power loss on every replica of a partition.

RF 3, min.insync.replicas 2, replicas a (leader), b, c. c dies; 300 records reach a and b
(the high watermark passes them: two in-sync copies); b dies, leaving a alone in the ISR (b
becomes an eligible leader replica); 50 more acks=1 records reach a only; a dies. Then the
power goes everywhere: every broker's boot id changes (so each comes back untrusted) and a's
log loses its unflushed tail down to offset 250. a (the shorter log, 250) is restarted first,
then b (the longest, 300).

- `unclean.recovery.strategy=Balanced` (the default): the controller waits for both former
  last copies to report their log ends on their heartbeats, then elects b, whose log holds
  every committed record; a truncates to it.
- `None` (the behaviour before unclean recovery): the former last ISR member a leads as soon as
  every last copy is back, and the committed records 250-299 that only b still held are gone.

Both topics share the cluster and the faults, so one run shows the difference.
"""

import os
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster
from partition_server.tests.test_live_unclean_shutdown import BOOT_ID, _lose_tail, _part, _wait
from wire.records.batch import iter_batches

pytestmark = pytest.mark.live
A, B, C = 0, 1, 2
BALANCED, NONE = "ur-balanced", "ur-none"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data = tmp_path_factory.mktemp("unclean-recovery")
    for b in (A, B, C):
        (data / f"broker-{b}").mkdir(parents=True, exist_ok=True)
        (data / f"broker-{b}" / BOOT_ID).write_text(str(uuid.uuid4()))
    c = LiveCluster(data, {"replica.lag.time.max.ms": "2000", "raftka.boot.id.file": BOOT_ID})
    c.start()
    yield c
    c.stop()


def _produce(cluster, topics, values, acks):
    acked = {t: [] for t in topics}
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": str(acks),
                  "enable.idempotence": acks == "all", "linger.ms": 5})
    for t in topics:
        for v in values:
            p.produce(t, str(v).encode(), partition=0, on_delivery=lambda err, msg, t=t: (
                acked[t].append(int(msg.value())) if err is None else None))
    assert p.flush(60) == 0
    return acked


def _consumer(bootstrap):
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"v-{uuid.uuid4()}",
                     "enable.auto.commit": False})


def _high_watermark(bootstrap, topic):
    c = _consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1]
    finally:
        c.close()


def _read_to_end(bootstrap, topic, timeout_s=30):
    """Every record below the high watermark, in offset order."""
    end = _high_watermark(bootstrap, topic)
    c = _consumer(bootstrap)
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + timeout_s
    while len(got) < end and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
    c.close()
    return got


def _log_end(log_dir):
    seg = sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))[-1]
    with open(os.path.join(log_dir, seg), "rb") as f:
        data = f.read()
    return max(h.last_offset for h in iter_batches(memoryview(data))) + 1


def _power_loss_everywhere(cluster):
    for b in (A, B, C):
        (cluster.layout.data_dir / f"broker-{b}" / BOOT_ID).write_text(str(uuid.uuid4()))


def test_balanced_recovers_the_longest_log_none_keeps_the_last_isr_member(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    configs = {BALANCED: {"min.insync.replicas": "2"},
               NONE: {"min.insync.replicas": "2", "unclean.recovery.strategy": "None"}}
    for fut in admin.create_topics([NewTopic(t, 1, replica_assignment=[[A, B, C]], config=cf)
                                    for t, cf in configs.items()]).values():
        fut.result(30)
    topics = list(configs)
    assert _produce(cluster, topics, range(0, 200), "all") == {t: list(range(200)) for t in topics}
    view = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.layout.broker_port(A)}"})
    cluster.kill(f"broker-{C}")
    assert _wait(lambda: all(_part(view, t).isrs == [A, B] for t in topics), 20)
    # in two flushes, so that a batch starts at offset 250, where a's log is cut below
    for part in (range(200, 250), range(250, 300)):
        assert _produce(cluster, topics, part, 1) == {t: list(part) for t in topics}
    # committed: both in-sync copies (= min.insync.replicas) hold all 300
    assert _wait(lambda: all(_high_watermark(cluster.bootstrap, t) == 300 for t in topics), 20)
    cluster.kill(f"broker-{B}")
    assert _wait(lambda: all(_part(view, t).isrs == [A] for t in topics), 20)
    # the ISR is below min.insync.replicas: acks=1 lands on a alone, uncommitted
    assert _produce(cluster, topics, range(300, 350), 1) == {t: list(range(300, 350))
                                                             for t in topics}
    cluster.kill(f"broker-{A}")
    _power_loss_everywhere(cluster)
    for t in topics:       # a's page cache never wrote back its last 100 records
        _lose_tail(cluster.layout.data_dir / f"broker-{A}" / f"{t}-0", 250)
        assert _log_end(cluster.layout.data_dir / f"broker-{A}" / f"{t}-0") == 250

    cluster.restart_broker(A)                      # the shorter log first (250)...
    view = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.layout.broker_port(A)}"})
    assert _wait(lambda: all(_part(view, t).isrs == [] for t in topics), 30)
    assert all(_part(view, t).leader == -1 for t in topics)   # b, eligible, may come back
    cluster.restart_broker(B)                      # ...then the longest (300)
    assert _wait(lambda: _part(view, BALANCED).leader == B, 30), \
        f"Balanced elected {_part(view, BALANCED).leader}, not the longest log"
    assert _wait(lambda: _part(view, NONE).leader == A, 30), \
        f"None elected {_part(view, NONE).leader}, not the former last ISR member"

    # the other one follows (truncating to the leader's log) and rejoins: two in-sync copies
    # again, so the high watermark reaches the leader's log end
    assert _wait(lambda: all(sorted(_part(view, t).isrs) == [A, B] for t in topics), 40)
    assert _wait(lambda: _high_watermark(cluster.bootstrap, BALANCED) == 300, 20)
    assert _wait(lambda: _high_watermark(cluster.bootstrap, NONE) == 250, 20), \
        (_high_watermark(cluster.bootstrap, NONE), _part(view, NONE).isrs)
    balanced = _read_to_end(cluster.bootstrap, BALANCED)
    assert balanced == list(range(300)), f"Balanced reads {len(balanced)} records"
    assert _read_to_end(cluster.bootstrap, NONE) == list(range(250)), \
        "None: the former last ISR member's log (its lost tail gone for good)"
    # c comes back too; every replica converges on the recovered log and writes go on
    cluster.restart_broker(C)
    assert _wait(lambda: sorted(_part(view, BALANCED).isrs) == [A, B, C], 40)
    more = _produce(cluster, [BALANCED], range(300, 310), "all")[BALANCED]
    assert more == list(range(300, 310))
    assert _read_to_end(cluster.bootstrap, BALANCED) == list(range(310))
