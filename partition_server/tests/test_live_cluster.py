"""A real 3-controller + 3-broker cluster on 127.0.0.1, driven by unmodified Kafka clients.

Interop matrix (issue #5): confluent-kafka, kafka-python 3.x, kafka-python 2.0.2 (from its own
virtualenv, `RAFTKA_KP2_PYTHON` or `.venv/kafka-python-2`), aiokafka — each creates an RF=3
topic, produces with every codec, reads everything back by assigned partitions with keys,
headers and timestamps, lists offsets (earliest, latest, by timestamp), describes configs and
deletes the topic. Then bad input against a live broker, broker SIGKILL + restart, and admin
errors.
"""

import json
import os
import random
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster, run_script
from wire.messages.api_keys import ApiKey

pytestmark = pytest.mark.live

INTEROP = Path(__file__).parent / "interop"
REPO = Path(__file__).resolve().parents[2]


def kp2_python() -> str:
    path = os.environ.get("RAFTKA_KP2_PYTHON") or str(REPO / ".venv" / "kafka-python-2" / "bin" / "python")
    assert os.path.exists(path), (
        f"kafka-python 2.0.2 interpreter not found at {path}: scripts/test.sh creates it")
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.stop()


@pytest.mark.parametrize("client,script", [
    ("confluent-kafka", "check_confluent.py"),
    ("kafka-python-3", "check_kafka_python.py"),
    ("kafka-python-2.0.2", "check_kafka_python.py"),
    ("aiokafka", "check_aiokafka.py"),
])
def test_interop(cluster, client, script):
    python = kp2_python() if client == "kafka-python-2.0.2" else sys.executable
    topic = f"interop-{client}-{uuid.uuid4().hex[:6]}".replace(".", "-")
    proc = run_script(python, INTEROP / script, cluster.bootstrap, topic, "3")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{client} printed no result; stderr:\n{proc.stderr[-3000:]}"
    result = json.loads(lines[-1])
    assert result["ok"], f"{client}: {result.get('error')}\n{proc.stderr[-2000:]}"
    assert result["acked"] == 60


def _admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def test_admin_errors_have_kafka_codes(cluster):
    admin = _admin(cluster)
    futures = admin.create_topics([NewTopic("bad name!", 1, 1), NewTopic("too-many-replicas", 1, 5),
                                   NewTopic("zero-partitions", 0, 1)], operation_timeout=10)
    codes = {}
    for name, fut in futures.items():
        with pytest.raises(Exception) as e:
            fut.result(20)
        codes[name] = e.value.args[0].code()
    from confluent_kafka import KafkaError
    assert codes["bad name!"] == KafkaError.TOPIC_EXCEPTION
    assert codes["too-many-replicas"] == KafkaError.INVALID_REPLICATION_FACTOR
    assert codes["zero-partitions"] == KafkaError.INVALID_PARTITIONS


def _produce(cluster, topic, n, start=0):
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2})
    acked = []
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), partition=0,
                  on_delivery=lambda err, msg: acked.append(msg.offset()) if err is None else None)
    assert p.flush(30) == 0
    return acked


def _consume_all(cluster, topic, expected, timeout_s=30):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "x",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + timeout_s
    while len(got) < expected and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
    c.close()
    return got


def test_bad_input_closes_only_the_offending_connection(cluster):
    topic = "bad-input"
    admin = _admin(cluster)                 # keep a reference: futures die with their client
    for fut in admin.create_topics([NewTopic(topic, 1, 3)]).values():
        fut.result(30)
    assert len(_produce(cluster, topic, 20)) == 20
    host, port = cluster.bootstrap.split(",")[0].split(":")
    rng = random.Random(5)
    idle = []
    for _ in range(1000):                       # 1,000 idle connections
        s = socket.create_connection((host, int(port)))
        idle.append(s)
    evil = [
        bytes(rng.getrandbits(8) for _ in range(300)),           # random bytes
        b"\x7f\xff\xff\xff" + b"x" * 100,                        # a frame claiming 2 GB
        b"\x00\x00\x00\x0c\x7f\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00",  # unknown api key
        b"\x00\x00\x01\x00\x00\x03\x00\x09",                     # cut off mid-frame
    ]
    for payload in evil:
        s = socket.create_connection((host, int(port)))
        s.sendall(payload)
        s.settimeout(5)
        try:
            data = s.recv(100)          # closed by the broker (b"") or never answered
            assert data == b"" or payload == evil[3]
        except socket.timeout:
            assert payload == evil[3]   # a half frame just waits for the rest
        s.close()
    for s in idle:
        s.close()
    # the broker still serves, and nothing written is lost
    assert len(_produce(cluster, topic, 10, start=20)) == 10
    assert _consume_all(cluster, topic, 30) == list(range(30))


def test_broker_sigkill_and_restart_recovers(cluster):
    topic = "restart-me"
    admin = _admin(cluster)                 # keep a reference: futures die with their client
    for fut in admin.create_topics([NewTopic(topic, 1, 3)]).values():
        fut.result(30)
    assert len(_produce(cluster, topic, 50)) == 50
    cluster.kill("broker-1")
    assert len(_produce(cluster, topic, 50, start=50)) == 50      # the others carry on
    cluster.restart_broker(1)
    assert len(_produce(cluster, topic, 50, start=100)) == 50
    assert _consume_all(cluster, topic, 150) == list(range(150))


def test_idempotent_retry_is_not_appended_twice(cluster):
    import trio

    from clients.connection import BrokerConnection
    from wire.errors import ErrorCode
    from wire.messages.index_generated import REQUESTS
    from wire.records.batch import build_batch
    topic = "idempotent"
    admin = _admin(cluster)
    for fut in admin.create_topics([NewTopic(topic, 1, 3)]).values():
        fut.result(30)
    md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    leader = cluster.layout.broker_port(md.leader)

    async def scenario():
        conn = BrokerConnection("127.0.0.1", leader)
        await conn.connect()
        init = await conn.request(REQUESTS[ApiKey.INIT_PRODUCER_ID](transactional_id=None, transaction_timeout_ms=60000), 4)
        assert init.error_code == 0 and init.producer_id >= 0
        pr = REQUESTS[ApiKey.PRODUCE]

        def produce(seq, n):
            batch = build_batch([(None, b"v%d" % (seq + i), [], None) for i in range(n)],
                                producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                                base_sequence=seq)
            return pr(acks=-1, timeout_ms=10000, topic_data=[pr.TopicProduceData(
                name=topic, partition_data=[pr.PartitionProduceData(index=0, records=batch)])])
        out = []
        for seq, n in ((0, 3), (0, 3), (3, 2), (9, 1)):      # second is a retry; last has a gap
            resp = await conn.request(produce(seq, n), 9)
            p = resp.responses[0].partition_responses[0]
            out.append((p.error_code, p.base_offset))
        await conn.aclose()
        return out
    results = trio.run(scenario)
    assert results[0] == (0, 0) and results[1] == (0, 0)      # the retry gets the same offset
    assert results[2] == (0, 3)
    assert results[3][0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "idem"})
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.close()
    assert (low, high) == (0, 5)                              # 3 + 2 records, no duplicate


def test_quorum_describe_cli(cluster):
    import subprocess
    out = subprocess.run([sys.executable, "-m", "clients.cli.main", "quorum", "describe",
                          "--bootstrap-server", cluster.bootstrap, "--output", "json"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["leader_id"] in {v["id"] for v in status["voters"]}
    assert sorted(v["id"] for v in status["voters"]) == [3000, 3001, 3002]
    assert sorted(o["id"] for o in status["observers"]) == [0, 1, 2]
    bad = subprocess.run([sys.executable, "-m", "clients.cli.main", "quorum", "describe",
                          "--bootstrap-server", "127.0.0.1:1"], capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 1 and "cannot reach" in bad.stderr and "Traceback" not in bad.stderr


def test_single_node_combined_mode(tmp_path):
    import subprocess

    from partition_server.testing import free_base_port
    base = free_base_port()
    props = (Path(__file__).resolve().parents[2] / "configs" / "single-node" /
             "server.properties").read_text()
    props = (props.replace("9092", str(base)).replace("9093", str(base + 1000))
             .replace("9193", str(base + 1100)).replace("./raftka-data", str(tmp_path)))
    (tmp_path / "server.properties").write_text(props)
    proc = subprocess.Popen([sys.executable, "-m", "partition_server", "--config",
                             str(tmp_path / "server.properties")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            line = proc.stdout.readline()
            if "unfenced" in line:
                break
        bootstrap = f"127.0.0.1:{base}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for fut in admin.create_topics([NewTopic("solo", 1, 1)]).values():
            fut.result(30)

        class One:
            pass
        one = One()
        one.bootstrap = bootstrap
        assert len(_produce(one, "solo", 25)) == 25
        assert _consume_all(one, "solo", 25) == list(range(25))
    finally:
        proc.terminate()
        proc.wait(30)


def test_acls_are_stored_by_the_controller(cluster):
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                       AclPermissionType, ResourcePatternType, ResourceType)
    admin = _admin(cluster)
    binding = AclBinding(ResourceType.TOPIC, "acl-topic", ResourcePatternType.LITERAL,
                         "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    for fut in admin.create_acls([binding]).values():
        assert fut.result(20) is None
    flt = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                           AclOperation.ANY, AclPermissionType.ANY)
    deleted = list(admin.delete_acls([flt]).values())[0].result(20)
    assert [(b.name, b.principal) for b in deleted] == [("acl-topic", "User:alice")]
    assert list(admin.delete_acls([flt]).values())[0].result(20) == []   # gone


def _session_fetch(topic, session_id, epoch, positions, forgotten=()):
    """A consumer Fetch (v12 fields) of `topic` in fetch session `session_id` at `epoch`:
    `positions` [(partition, offset)] to add or update, `forgotten` partitions to drop."""
    from wire.messages.index_generated import REQUESTS
    fr = REQUESTS[ApiKey.FETCH]
    return fr(replica_id=-1, max_wait_ms=200, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
              session_id=session_id, session_epoch=epoch,
              topics=[fr.FetchTopic(topic=topic, partitions=[
                  fr.FetchPartition(partition=q, fetch_offset=off, partition_max_bytes=1 << 20,
                                    current_leader_epoch=-1, last_fetched_epoch=-1,
                                    log_start_offset=-1) for q, off in positions])]
              if positions else [],
              forgotten_topics_data=[fr.ForgottenTopic(topic=topic, partitions=list(forgotten))]
              if forgotten else [], rack_id="")


def _fetched_partitions(resp):
    return {q.partition_index: q for t in resp.responses for q in t.partitions}


async def _fetch_session_scenario(cluster, topic, p):
    """KIP-227 on the wire against broker 0 (which leads both partitions of `topic`, each holding
    one record; `p` produces more): open, quiet, news, wrong epoch, unknown id, forget, close."""
    from clients.connection import BrokerConnection
    from wire.errors import ErrorCode

    def fetch(session_id, epoch, positions, forgotten=()):
        return _session_fetch(topic, session_id, epoch, positions, forgotten)
    parts = _fetched_partitions
    conn = BrokerConnection("127.0.0.1", cluster.layout.broker_port(0))
    await conn.connect()
    full = await conn.request(fetch(0, 0, [(0, 0), (1, 0)]), 12)
    assert full.error_code == 0 and full.session_id != 0
    assert sorted(parts(full)) == [0, 1] and all(q.records for q in parts(full).values())
    sid = full.session_id
    # the client moves both positions to 1; nothing new: the answer lists no partition
    quiet = await conn.request(fetch(sid, 1, [(0, 1), (1, 1)]), 12)
    assert quiet.error_code == 0 and quiet.session_id == sid and parts(quiet) == {}
    p.produce(topic, b"second", partition=1)
    assert p.flush(30) == 0
    news = await conn.request(fetch(sid, 2, []), 12)        # positions come from the session
    assert list(parts(news)) == [1] and parts(news)[1].high_watermark == 2
    assert parts(news)[1].records
    bad_epoch = await conn.request(fetch(sid, 7, []), 12)
    assert bad_epoch.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    unknown = await conn.request(fetch(sid + 1, 1, []), 12)
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    gone = await conn.request(fetch(sid, 3, [], forgotten=[0, 1]), 12)
    assert gone.error_code == 0 and parts(gone) == {}
    closed = await conn.request(fetch(sid, -1, [(0, 0)]), 12)
    assert closed.session_id == 0 and list(parts(closed)) == [0]
    again = await conn.request(fetch(sid, 4, []), 12)
    assert again.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    await conn.aclose()


def _kafka_python_reads_with_sessions(cluster, admin, many):
    """Create `many` (4 partitions, RF 3) with 2000 records, read it with kafka-python 3.x (small
    fetches, so many incremental ones, up to 60 s); returns the values per partition and the
    number of fetch sessions the brokers report open while the consumer still runs."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    for fut in admin.create_topics([NewTopic(many, 4, 3)]).values():
        fut.result(30)
    prod = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(2000):
        prod.produce(many, str(i).encode(), partition=i % 4)
    assert prod.flush(30) == 0
    kc = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                       auto_offset_reset="earliest", fetch_max_wait_ms=100, max_partition_fetch_bytes=2000)
    kc.assign([KTP(many, q) for q in range(4)])
    got: dict[int, list[int]] = {q: [] for q in range(4)}
    deadline = time.time() + 60
    while sum(map(len, got.values())) < 2000 and time.time() < deadline:
        for tp, msgs in kc.poll(500).items():
            got[tp.partition] += [int(m.value) for m in msgs]
    import urllib.request
    sessions = 0
    for b in (0, 1, 2):           # kafka-python keeps one session per broker it fetches from
        text = urllib.request.urlopen(f"http://127.0.0.1:{cluster.layout.metrics_port(b)}/metrics",
                                      timeout=10).read().decode()
        sessions += int(next(line.split()[1] for line in text.splitlines()
                             if line.startswith("raftka_fetch_sessions ")))
    kc.close()
    return got, sessions


def test_incremental_fetch_sessions(cluster):
    """KIP-227 on the wire: a full fetch opens a session; incremental fetches carry only what
    changed both ways; wrong epochs and unknown sessions get their top-level errors; then
    kafka-python 3.x (which uses sessions) reads a 4-partition topic completely and in order."""
    import trio
    topic = "sessions"
    admin = _admin(cluster)
    # both partitions on broker 0 so one connection fetches both
    for fut in admin.create_topics([NewTopic(topic, 2, replica_assignment=[[0], [0]])]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})    # RF 1 < min.insync 2
    for part in (0, 1):
        p.produce(topic, b"first", partition=part)
    assert p.flush(30) == 0
    trio.run(_fetch_session_scenario, cluster, topic, p)

    many = "sessions-many"
    got, sessions = _kafka_python_reads_with_sessions(cluster, admin, many)
    leaders = {m.leader for m in admin.list_topics(many, timeout=10).topics[many].partitions.values()}
    assert sessions >= len(leaders)
    for q in range(4):
        assert got[q] == list(range(q, 2000, 4)), f"partition {q}"


def test_quorum_loss_keeps_the_data_plane_serving(cluster):
    """F9: with 2 of 3 controllers down, metadata changes are refused with a clear error while
    brokers keep serving existing partitions from their last image; all recovers afterwards."""
    topic = "quorum-loss"
    admin = _admin(cluster)
    for fut in admin.create_topics([NewTopic(topic, 1, 3)]).values():
        fut.result(30)
    assert len(_produce(cluster, topic, 10)) == 10
    cluster.kill("controller-3000")
    cluster.kill("controller-3001")
    try:
        fut = admin.create_topics([NewTopic("not-now", 1, 1)], request_timeout=20)["not-now"]
        with pytest.raises(Exception) as refused:
            fut.result(40)
        # the broker answers REQUEST_TIMED_OUT after 15 s; a loaded client may give up first
        assert any(s in str(refused.value) for s in ("REQUEST_TIMED_OUT", "NOT_CONTROLLER",
                                                     "_TRANSPORT", "_TIMED_OUT")), refused.value
        assert len(_produce(cluster, topic, 10, start=10)) == 10     # data plane still works
        assert _consume_all(cluster, topic, 20) == list(range(20))
    finally:
        cluster.restart_controller(0)
        cluster.restart_controller(1)
    for fut in admin.create_topics([NewTopic("after-quorum", 1, 1)]).values():
        fut.result(40)
    # "not-now" was never acknowledged. A timed-out request is in doubt, as in Kafka: the
    # surviving controller may have appended it before it noticed it had no majority, and then
    # it commits once the majority is back — so its presence now is allowed either way.
