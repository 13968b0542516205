"""`raftka produce` and `raftka perf produce` against one live cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from clients.cli.main import main
from partition_server.testing import LiveCluster


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.stop()


def _run(argv, capsys):
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def _read(bootstrap: str, topic: str, expect: int) -> list:
    """Everything in the topic, read with librdkafka (an independent client)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-" + topic,
                  "enable.auto.commit": False})
    md = c.list_topics(topic, timeout=10).topics[topic]
    c.assign([TopicPartition(topic, p, 0) for p in md.partitions])
    out = []
    for _ in range(60):
        for m in c.consume(1000, 0.5):
            if not m.error():
                out.append(m)
        if len(out) >= expect:
            break
    c.close()
    return out


@pytest.mark.live
def test_produce_from_file_with_keys_headers(live, capsys, tmp_path):
    topic = f"prod-{uuid.uuid4().hex[:6]}"
    assert _run(["topics", "create", "--topic", topic, "--partitions", "3",
                 "--replication-factor", "3", "--bootstrap-server", live.bootstrap],
                capsys)[0] == 0
    src = tmp_path / "lines.txt"
    src.write_text("".join(f"k{i % 4}:value {i}\n" for i in range(300)))
    code, out, err = _run(["produce", "--topic", topic, "--file", str(src), "--key-separator",
                           ":", "--header", "source=file", "--compression", "zstd",
                           "--bootstrap-server", live.bootstrap, "--output", "json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["records"] == 300 and res["delivered"] == 300 and res["errors"] == 0
    msgs = _read(live.bootstrap, topic, 300)
    assert len(msgs) == 300
    by_key: dict = {}
    for m in msgs:
        assert m.headers() == [("source", b"file")]
        by_key.setdefault(m.key(), set()).add(m.partition())
    assert sorted(by_key) == [b"k0", b"k1", b"k2", b"k3"]
    assert all(len(p) == 1 for p in by_key.values())          # one partition per key
    values = sorted(int(m.value().split()[1]) for m in msgs)
    assert values == list(range(300))
    # a line without the separator is a usage error, reported with its line number
    bad = tmp_path / "bad.txt"
    bad.write_text("a:1\nno separator here\n")
    code, out, err = _run(["produce", "--topic", topic, "--file", str(bad), "--key-separator",
                           ":", "--bootstrap-server", live.bootstrap], capsys)
    assert code == 2 and "line 2" in err


@pytest.mark.live
def test_produce_stdin_subprocess_and_errors(live):
    topic = f"prod-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ, RAFTKA_BOOTSTRAP=live.bootstrap)
    cmd = [sys.executable, "-m", "clients.cli.main"]
    subprocess.run(cmd + ["topics", "create", "--topic", topic, "--partitions", "1"],
                   env=env, check=True, capture_output=True, timeout=60)
    proc = subprocess.run(cmd + ["produce", "--topic", topic, "--acks", "1"],
                          input="one\ntwo\nthree\n", text=True, capture_output=True, env=env,
                          timeout=60)
    assert proc.returncode == 0 and "Produced 3 of 3 record(s)" in proc.stdout, proc.stderr
    assert [m.value() for m in _read(live.bootstrap, topic, 3)] == [b"one", b"two", b"three"]
    # unknown topic: exit 1, one line
    proc = subprocess.run(cmd + ["produce", "--topic", "missing-" + topic], input="x\n",
                          text=True, capture_output=True, env=env, timeout=60)
    assert proc.returncode == 1 and "unknown topic" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    # acks=all on a topic with fewer replicas than min.insync.replicas (2 in the test cluster):
    # refused until the delivery timeout, and the reason is given
    lonely = topic + "-rf1"
    subprocess.run(cmd + ["topics", "create", "--topic", lonely, "--partitions", "1",
                          "--replication-factor", "1"],
                   env=env, check=True, capture_output=True, timeout=60)
    proc = subprocess.run(cmd + ["produce", "--topic", lonely, "--property",
                                 "delivery.timeout.ms=2000"], input="x\n", text=True,
                          capture_output=True, env=env, timeout=60)
    assert proc.returncode == 1 and "NOT_ENOUGH_REPLICAS" in proc.stderr, proc.stderr
    # unreachable: exit 3
    proc = subprocess.run(cmd + ["produce", "--topic", topic, "--bootstrap-server",
                                 "127.0.0.1:1"], input="x\n", text=True, capture_output=True,
                          timeout=60)
    assert proc.returncode == 3 and "cannot reach" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.live
def test_perf_produce_ours(live, capsys):
    topic = f"perf-{uuid.uuid4().hex[:6]}"
    code, out, err = _run(["perf", "produce", "--topic", topic, "--num-records", "20000",
                           "--partitions", "3", "--bootstrap-server", live.bootstrap,
                           "--output", "json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["client"] == "raftka" and res["records"] == 20000 and res["errors"] == 0
    assert res["records_per_s"] > 0 and res["p99_ms"] >= res["p50_ms"]
    code, out, err = _run(["perf", "produce", "--topic", topic, "--num-records", "2000",
                           "--bootstrap-server", live.bootstrap], capsys)
    assert code == 0 and "records_per_s" in out and "raftka producer" in out
    assert len(_read(live.bootstrap, topic, 22000)) == 22000


@pytest.mark.live
def test_perf_consume_ours_and_confluent(live, capsys):
    topic = f"perfc-{uuid.uuid4().hex[:6]}"
    code, _, err = _run(["perf", "produce", "--topic", topic, "--num-records", "15000",
                         "--partitions", "3", "--bootstrap-server", live.bootstrap,
                         "--output", "json"], capsys)
    assert code == 0, err
    for client in ("raftka", "confluent"):
        code, out, err = _run(["perf", "consume", "--topic", topic, "--num-records", "15000",
                               "--client", client, "--bootstrap-server", live.bootstrap,
                               "--output", "json"], capsys)
        assert code == 0, err
        res = json.loads(out)
        assert res["records"] == 15000 and res["records_per_s"] > 0, res
        assert res["mb_per_s"] > 0
    code, out, err = _run(["perf", "consume", "--topic", topic, "--num-records", "15000",
                           "--bootstrap-server", live.bootstrap], capsys)
    assert code == 0 and "raftka consumer" in out
    code, out, err = _run(["perf", "consume", "--topic", "no-such-topic-here", "--num-records",
                           "10", "--bootstrap-server", live.bootstrap], capsys)
    assert code != 0 and "Traceback" not in err and "no-such-topic-here" in err


@pytest.mark.live
def test_perf_counts_deliveries_by_partition_and_reads_a_share(live):
    """bench/broker_vs_tansu.py --consumers: each consumer reads its partitions' records, as
    many as the producer's delivery reports counted there."""
    from clients.cli import perf
    topic = f"perfs-{uuid.uuid4().hex[:6]}"
    res = perf.produce(live.bootstrap, topic, 9000, 50, acks="1", partitions=3,
                       progress=False)
    delivered = res["delivered_by_partition"]
    assert res["errors"] == 0 and len(delivered) == 3 and sum(delivered) == 9000
    share = perf.consume(live.bootstrap, topic, delivered[0] + delivered[2], timeout_s=30,
                         progress=False, partitions=[0, 2])
    assert share["records"] == delivered[0] + delivered[2]


@pytest.mark.live
def test_perf_produce_counts_what_the_flush_left_undelivered(live):
    """acks=all on one replica under min.insync.replicas=2: nothing is acknowledged, and the
    report says so (it once said 0 errors)."""
    from clients.cli import perf
    res = perf.produce(live.bootstrap, f"perfu-{uuid.uuid4().hex[:6]}", 50, 10, acks="all",
                       partitions=1, replication_factor=1, progress=False, flush_timeout_s=3)
    assert res["errors"] == 50 and res["delivered_by_partition"] == [0]
