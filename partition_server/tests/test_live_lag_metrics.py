"""Broker-side consumer lag (messages and seconds) on the /metrics endpoint (issue #7)."""

import re
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.group.lag import compute_lag, timestamp_at
from partition_server.testing import LiveCluster
from wire.records.batch import build_batch


def test_compute_lag_and_timestamp_at():
    assert compute_lag(40, 100, 1_000, 61_000).messages == 60
    assert compute_lag(40, 100, 1_000, 61_000).seconds == 60.0
    assert compute_lag(100, 100, 1_000, 61_000).seconds == 0.0      # nothing unconsumed
    assert compute_lag(120, 100, None, 0).messages == 0
    data = build_batch([(b"k", b"a", [], 5_000), (b"k", b"b", [], 7_000)], base_offset=10)
    assert timestamp_at(data, 11) == 7_000 and timestamp_at(data, 10) == 5_000
    assert timestamp_at(data, 12) is None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("lag"), {"raftka.group.lag.interval.ms": "300"})
    c.start()
    yield c
    c.stop()


def _scrape(cluster):
    text = ""
    for b in range(3):
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.layout.metrics_port(b)}/metrics",
                                    timeout=5) as r:
            assert r.status == 200
            text += r.read().decode()
    return text


def _value(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(re.escape(name + "{" + want + "}") + r" (\S+)", text)
    return None if m is None else float(m.group(1))


def _wait_value(cluster, name, pred, timeout_s=15, **labels):
    end = time.time() + timeout_s
    while True:
        v = _value(_scrape(cluster), name, **labels)
        if (v is not None and pred(v)) or time.time() > end:
            return v
        time.sleep(0.3)


@pytest.mark.live
def test_lag_in_messages_and_seconds_on_metrics(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic("lag-t", 3, 3)]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    old = int(time.time() * 1000) - 60_000
    for i in range(100):                       # records 0..49 are a minute old, 50..99 new
        p.produce("lag-t", b"v", partition=0, timestamp=old if i < 50 else 0)
    for i in range(10):
        p.produce("lag-t", b"v", partition=1)
        p.produce("lag-t", b"v", partition=2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-lag"})
    # three partitions led by three brokers: the coordinator reads one locally and asks the
    # other leaders over the wire
    c.commit(offsets=[TopicPartition("lag-t", 0, 40), TopicPartition("lag-t", 1, 10),
                      TopicPartition("lag-t", 2, 3)], asynchronous=False)
    labels0 = {"group": "g-lag", "topic": "lag-t", "partition": "0"}
    labels1 = {"group": "g-lag", "topic": "lag-t", "partition": "1"}
    assert _wait_value(cluster, "raftka_consumer_group_lag_messages", lambda v: v == 60,
                       **labels0) == 60
    seconds = _value(_scrape(cluster), "raftka_consumer_group_lag_seconds", **labels0)
    assert 59 <= seconds < 120                 # the record at offset 40 is a minute old
    text = _scrape(cluster)
    assert _value(text, "raftka_consumer_group_lag_messages", **labels1) == 0
    assert _value(text, "raftka_consumer_group_lag_seconds", **labels1) == 0
    assert _value(text, "raftka_consumer_group_lag_messages", group="g-lag", topic="lag-t",
                  partition="2") == 7
    c.commit(offsets=[TopicPartition("lag-t", 0, 50)], asynchronous=False)
    assert _wait_value(cluster, "raftka_consumer_group_lag_messages", lambda v: v == 50,
                       **labels0) == 50
    assert _value(_scrape(cluster), "raftka_consumer_group_lag_seconds", **labels0) < 30
    c.close()
    assert "raftka_partition_high_watermark{" in text
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{cluster.layout.metrics_port(0)}/nope", timeout=5)
    assert err.value.code == 404


async def test_lag_refresh_reads_a_record_only_when_the_committed_offset_moves():
    """An idle group costs no record read per refresh: the timestamp at a committed offset
    (below the high watermark) is kept while the committed offset stays."""
    import types

    from partition_server.group.lag import LagMonitor
    from partition_server.replication.partition import Role
    from wire.errors import ErrorCode

    reads = []
    data = build_batch([(b"k", b"v%d" % i, [], 1_000 + i) for i in range(10)], base_offset=0)

    class Log:
        def read(self, offset, max_bytes, min_one=False):
            reads.append(offset)
            return types.SimpleNamespace(read_bytes=lambda: data)
    hosted = types.SimpleNamespace(state=types.SimpleNamespace(role=Role.LEADER, high_watermark=10),
                                   offline=False, log=Log())
    offsets = {"g": {("t", 0): (4, None)}}
    lag = LagMonitor(types.SimpleNamespace(offsets=offsets, owns=lambda gid: ErrorCode.NONE),
                     types.SimpleNamespace(get=lambda t, p: hosted, watchers=[],
                                           log_dir_failed=False),
                     image=lambda: None, peers=None, interval_s=5)
    await lag.refresh()
    await lag.refresh()
    assert reads == [4] and lag.table[("g", "t", 0)].messages == 6
    offsets["g"][("t", 0)] = (7, None)
    lag.touch("g")                      # as the coordinator does when offsets change
    await lag.refresh()
    await lag.refresh()
    assert reads == [4, 7] and lag.table[("g", "t", 0)].messages == 3
