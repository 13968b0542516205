"""`raftka log-dirs describe` (clients/cli/log_dirs.py): list parsing and Kafka's JSON shape
without a cluster, then against a live one, compared with kafka-python's describe_log_dirs."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from clients.admin.types import LogDirDescription, ReplicaInfo
from clients.cli.log_dirs import parse_broker_list, parse_topic_list, to_kafka_json
from clients.cli.main import main
from clients.cli.output import CommandError
from clients.cluster import TopicPartition as TP
from clients.errors import KafkaConnectionError
from partition_server.testing import LiveCluster
from wire.errors import ErrorCode, KafkaError


def test_broker_and_topic_lists():
    assert parse_broker_list("") == []
    assert parse_broker_list("2,0,,1,2") == [2, 0, 1]        # empty items skipped, as Kafka
    for bad in ("a", "1,x", "-1", "1.5"):
        with pytest.raises(CommandError) as exc:
            parse_broker_list(bad)
        assert exc.value.code == 2 and "--broker-list expects broker ids" in str(exc.value)
    assert parse_topic_list(" a, b ,,a") == {"a", "b"}
    with pytest.raises(CommandError) as exc:
        parse_topic_list("ok,no/slash")
    assert exc.value.code == 2 and "'no/slash' cannot be a topic" in str(exc.value)


def test_kafka_json_shape_filters_topics_and_reports_errors():
    healthy = LogDirDescription("/d/broker-0", None, {
        TP("b", 1): ReplicaInfo(30, 0), TP("a", 0): ReplicaInfo(100, 5),
        TP("a", 1): ReplicaInfo(7, 0, True)}, 1000, 400)
    failed = LogDirDescription("/d2/broker-0", KafkaError.from_code(
        ErrorCode.KAFKA_STORAGE_ERROR, "disk"), {})
    doc = to_kafka_json({1: KafkaConnectionError("refused"), 0: [healthy, failed]}, {"a"},
                        fenced={1})
    assert doc == {"version": 1, "brokers": [
        {"broker": 0, "logDirs": [
            {"logDir": "/d/broker-0", "error": None, "partitions": [
                {"partition": "a-0", "size": 100, "offsetLag": 5, "isFuture": False},
                {"partition": "a-1", "size": 7, "offsetLag": 0, "isFuture": True}]},
            {"logDir": "/d2/broker-0",
             "error": "org.apache.kafka.common.errors.KafkaStorageException",
             "partitions": []}]},
        {"broker": 1, "error": "broker 1 (fenced: stopped or not caught up) did not answer: "
                               "refused", "logDirs": []}]}
    # no topic list: every replica
    assert [p["partition"] for p in to_kafka_json({0: [healthy]}, set())["brokers"][0]
            ["logDirs"][0]["partitions"]] == ["a-0", "a-1", "b-1"]


def test_usage_errors_need_no_cluster(capsys):
    assert main(["log-dirs", "describe", "--broker-list", "0,zero"]) == 2
    assert "--broker-list expects broker ids like 0,1,2; 'zero' is not one" in \
        capsys.readouterr().err
    assert main(["log-dirs", "describe", "--bootstrap-server", "127.0.0.1:1"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("raftka log-dirs describe: cannot reach the cluster") and \
        "Traceback" not in err


# -- live -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.stop()


def _cli(capsys, live, *argv):
    capsys.readouterr()
    code = main(["log-dirs", "describe", *argv, "--bootstrap-server", live.bootstrap])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def _produce(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, value=b"v" * 500, key=str(i).encode(), partition=i % 2)
    assert p.flush(30) == 0


def _kafka_python_view(bootstrap: str, topic: str) -> set:
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answers = admin.describe_log_dirs(brokers=[0, 1, 2])
    finally:
        admin.close()
    return {(a["broker"], d["log_dir"], f"{t['name']}-{p['partition_index']}",
             p["partition_size"], p["offset_lag"], p["is_future_key"])
            for a in answers for d in a["log_dirs"] for t in d["topics"] if t["name"] == topic
            for p in t["partitions"]}


def _ours(doc: dict) -> set:
    return {(b["broker"], d["logDir"], p["partition"], p["size"], p["offsetLag"], p["isFuture"])
            for b in doc["brokers"] for d in b["logDirs"] for p in d["partitions"]}


@pytest.mark.live
def test_live_log_dirs_describe(live, capsys):
    from confluent_kafka.admin import AdminClient, NewTopic
    topic, other = f"ld-{uuid.uuid4().hex[:6]}", f"ld-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": live.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 2, 3), NewTopic(other, 1, 1)]).values():
        f.result(30)
    _produce(live.bootstrap, topic, 40)

    # what kafka-python reads and what we print agree, once the followers have copied
    deadline = time.monotonic() + 30
    while True:
        code, out, err = _cli(capsys, live, "--topic-list", topic, "--output", "json")
        assert code == 0, err
        doc = json.loads(out)
        ours, theirs = _ours(doc), _kafka_python_view(live.bootstrap, topic)
        sizes = {size for (_b, _d, _p, size, _l, _f) in ours}
        if (ours == theirs and len(ours) == 6 and len(sizes) <= 2) or \
                time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert ours == theirs
    assert {(b, p) for (b, _d, p, *_rest) in ours} == \
        {(b, f"{topic}-{p}") for b in (0, 1, 2) for p in (0, 1)}
    assert all(size > 20 * 500 for (_b, _d, _p, size, _l, _f) in ours)
    assert doc["version"] == 1 and [b["broker"] for b in doc["brokers"]] == [0, 1, 2]
    for b in doc["brokers"]:
        assert set(b) == {"broker", "logDirs"} and len(b["logDirs"]) == 1
        d = b["logDirs"][0]
        assert set(d) == {"logDir", "error", "partitions"} and d["error"] is None
        assert d["logDir"].endswith(f"broker-{b['broker']}")
        for p in d["partitions"]:
            assert set(p) == {"partition", "size", "offsetLag", "isFuture"}

    # one broker, no topic filter: the other topic's replica is there too (it is on one broker)
    code, out, _ = _cli(capsys, live, "--broker-list", "0,1,2", "--output", "json")
    everything = _ours(json.loads(out))
    assert code == 0 and sum(p == f"{other}-0" for (_b, _d, p, *_r) in everything) == 1

    code, out, err = _cli(capsys, live, "--broker-list", "1", "--topic-list", topic)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["BROKER", "LOG", "DIR", "STATE", "REPLICAS", "SIZE", "USABLE",
                                "TOTAL"]
    assert lines[1].split()[0] == "1" and lines[1].split()[2:4] == ["ok", "2"]
    assert sorted(line.split()[2] for line in lines[4:]) == [f"{topic}-0", f"{topic}-1"]

    code, out, err = _cli(capsys, live, "--broker-list", "1,7,9")
    assert code == 1 and out == ""
    assert "The given brokers do not exist from --broker-list: 7,9. Current existent brokers: " \
           "0,1,2" in err

    # a broker that does not answer is an error entry; the others are still described
    live.kill("broker-2")
    code, out, err = _cli(capsys, live, "--broker-list", "0,2", "--topic-list", topic,
                          "--output", "json")
    doc = json.loads(out)
    assert code == 1 and "broker 2" in err and "did not answer" in err
    assert [b["broker"] for b in doc["brokers"]] == [0, 2]
    assert len(doc["brokers"][0]["logDirs"][0]["partitions"]) == 2
    assert doc["brokers"][1]["logDirs"] == [] and "did not answer" in doc["brokers"][1]["error"]
