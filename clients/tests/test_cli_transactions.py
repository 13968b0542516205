"""`raftka transactions list|describe|describe-producers|abort` against a live cluster: an open
transaction is listed and described, its producer shows the transaction's first offset, abort at
a wrong offset is refused (exit 1), abort at the right one closes it (the last stable offset moves
past it and read_committed readers never see its record), JSON output parses, an unknown id and an
unreachable cluster give one line and their exit codes."""

import json
import os
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live
TOPIC, TID = "cli-txn", "cli-txn-app"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cli-txn"), {"transaction.state.log.num.partitions": "3"})
    c.start()
    yield c
    c.stop()


def _cli(cluster, *argv):
    env = dict(os.environ, RAFTKA_BOOTSTRAP=cluster.bootstrap)
    return subprocess.run([sys.executable, "-m", "clients.cli.main", "transactions", *argv],
                          capture_output=True, text=True, env=env, timeout=90)


def _lso(cluster):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cli-txn-check",
                  "isolation.level": "read_committed"})
    try:
        return c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)[1]
    finally:
        c.close()


def test_transactions_cli(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(TOPIC, 1, 3)]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TID,
                  "transaction.timeout.ms": 600000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, b"hanging", partition=0)
    assert p.flush(30) == 0

    out = _cli(cluster, "list", "--state", "Ongoing", "--output", "json")
    assert out.returncode == 0, out.stderr
    listed = {t["transactional_id"]: t for t in json.loads(out.stdout)}
    assert listed[TID]["state"] == "Ongoing"

    out = _cli(cluster, "describe", "--transactional-id", TID, "--output", "json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["state"] == "Ongoing" and info["partitions"] == [f"{TOPIC}-0"]
    out = _cli(cluster, "describe", "--transactional-id", "nobody")
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr

    out = _cli(cluster, "describe-producers", "--topic", TOPIC, "--partition", "0", "--output", "json")
    assert out.returncode == 0, out.stderr
    producers = json.loads(out.stdout)
    assert [x["current_txn_start_offset"] for x in producers] == [0]
    assert _lso(cluster) == 0                          # the open transaction holds readers back

    out = _cli(cluster, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "7")
    assert out.returncode == 1 and "open ones start at [0]" in out.stderr, out.stderr
    out = _cli(cluster, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0")
    assert out.returncode == 0 and "Aborted" in out.stdout, out.stderr
    assert _lso(cluster) == 2                          # the record and the ABORT marker
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cli-txn-read",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    seen = [m.value() for m in (c.poll(0.5) for _ in range(6)) if m is not None and not m.error()]
    c.close()
    assert seen == []

    out = _cli(cluster, "abort", "--topic", "no-such-topic", "--partition", "0", "--start-offset", "0")
    assert out.returncode == 1 and "unknown topic" in out.stderr
    out = _cli(cluster, "list", "--bootstrap-server", "127.0.0.1:1")
    assert out.returncode == 3 and "Traceback" not in out.stderr
