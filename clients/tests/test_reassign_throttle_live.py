"""Replication throttles and `raftka reassign` on a live 3 + 3 cluster (issue 19 items 2, 3), and
kafka-python's DescribeLogDirs (what the progress view reads).

The brokers run with `replication.quota.window.num=1`: a throttle's initial burst is then one
second's worth instead of Kafka's eleven, so a few MB show the throttled rate in seconds. No upper
bound on any time (the machine is shared): a throttled copy must take at least half the time its
bytes need at the rate, and must be seen part-way (progress, not a stall then a jump)."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid

import pytest
import trio

from clients.admin import (AdminClient, AlterConfigOp, AlterConfigOpType, ConfigResource,
                           ConfigResourceType, NewTopic)
from clients.admin import LATEST
from clients.cli.main import main
from clients.cluster import TopicPartition
from clients.producer import Producer
from partition_server.testing import LiveCluster
from wire.errors import ErrorCode

pytestmark = pytest.mark.live

RATE = 300_000                   # bytes/s
RECORD = b"x" * 1000


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    c = LiveCluster(tmp_path_factory.mktemp("throttle"), {"replication.quota.window.num": "1"})
    c.start()
    yield c
    c.stop()


async def _until(check, timeout_s: float, what: str):
    last = None
    with trio.move_on_after(timeout_s):
        while True:
            last = await check()
            if last:
                return last
            await trio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last: {last!r}")


async def _topic(admin, assignment: dict, records: int) -> str:
    """A topic with `assignment` ({partition: replicas}) and `records` of 1,000 bytes in each."""
    topic = f"thr-{uuid.uuid4().hex[:6]}"
    assert await admin.create_topics([NewTopic(topic, replica_assignment=assignment)]) == \
        {topic: None}

    async def led():
        await admin.cluster.refresh_metadata([topic], force=True)
        d = (await admin.describe_topics([topic]))[topic]
        return not isinstance(d, Exception) and all(p.leader >= 0 for p in d.partitions)
    await _until(led, 30, f"{topic} led")
    async with Producer(admin.cluster, {"acks": "1", "linger.ms": "5"}) as p:
        for i in range(records):
            for partition in assignment:
                await p.send(topic, RECORD, partition=partition)
        await p.flush()
    return topic


async def _broker_has(admin, broker: int, key: str, value: str | None) -> bool:
    res = ConfigResource(ConfigResourceType.BROKER, str(broker))
    entries = (await admin.describe_configs([res]))[res]
    return any(e.name == key and e.value == value for e in entries) if value is not None else \
        all(e.name != key or e.source != "DYNAMIC_BROKER_CONFIG" for e in entries)


async def _produce_slowly(admin, topic: str, partitions, stop: trio.Event, counts: dict):
    """Clients keep producing (acks=all) to the partitions being moved."""
    async with Producer(admin.cluster, {"acks": "all"}) as p:
        while not stop.is_set():
            for partition in partitions:
                await (await p.send(topic, b"during-move", partition=partition))
                counts[partition] = counts.get(partition, 0) + 1
            await trio.sleep(0.05)


async def test_live_throttled_move_copies_at_the_rate_while_clients_produce(live):
    records = 3000                                   # ~3 MB per partition
    async with AdminClient(live.bootstrap) as admin:
        # RF 2 (the dev cluster's min.insync.replicas is 2: acks=all needs both in sync)
        topic = await _topic(admin, {0: [0, 1], 1: [0, 1]}, records)
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        # both partitions move [0, 1] -> [0, 2]; partition 0 is throttled on the follower side
        # (broker 2 fetching), partition 1 on the leader side (broker 0 serving)
        T, B = ConfigResourceType.TOPIC, ConfigResourceType.BROKER
        # bad values: INVALID_CONFIG naming the key and the rule, nothing stored
        bad = await admin.incremental_alter_configs({
            ConfigResource(B, "0"): [AlterConfigOp("leader.replication.throttled.rate", "-1")],
            ConfigResource(T, topic): [AlterConfigOp("leader.replication.throttled.replicas",
                                                     "0-0")]})
        assert [e.error_code for e in bad.values()] == [ErrorCode.INVALID_CONFIG] * 2
        assert "leader.replication.throttled.rate: must be >= 0" in str(
            bad[ConfigResource(B, "0")])
        assert "[partitionId]:[brokerId]" in str(bad[ConfigResource(T, topic)])
        assert await admin.incremental_alter_configs({ConfigResource(T, topic): [
            AlterConfigOp("follower.replication.throttled.replicas", "0:2"),
            AlterConfigOp("leader.replication.throttled.replicas", "1:0")]}) == \
            {ConfigResource(T, topic): None}
        assert await admin.incremental_alter_configs({
            ConfigResource(B, "2"): [AlterConfigOp("follower.replication.throttled.rate",
                                                   str(RATE))],
            ConfigResource(B, "0"): [AlterConfigOp("leader.replication.throttled.rate",
                                                   str(RATE))]}) == \
            {ConfigResource(B, "2"): None, ConfigResource(B, "0"): None}
        for broker, key in ((2, "follower"), (0, "leader")):
            await _until(lambda: _broker_has(admin, broker, f"{key}.replication.throttled.rate",
                                             str(RATE)), 30, f"broker {broker}'s {key} rate")
        leader_bytes = (await admin.describe_replica_log_dirs([0], [tp0, tp1]))[0]
        size = min(leader_bytes[tp0][0], leader_bytes[tp1][0])
        assert size >= records * 1000

        stop, counts = trio.Event(), {}
        partial = set()                  # partitions seen part-way copied
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_produce_slowly, admin, topic, [0, 1], stop, counts)
            started = time.monotonic()
            assert await admin.alter_partition_reassignments({tp0: [0, 2], tp1: [0, 2]}) == \
                {tp0: None, tp1: None}

            async def done():
                sizes = await admin.describe_replica_log_dirs([2], [tp0, tp1])
                for tp in (tp0, tp1):
                    copied = sizes[2].get(tp, (0, 0))[0] if isinstance(sizes[2], dict) else 0
                    if 0.1 * size < copied < 0.9 * size:
                        partial.add(tp.partition)
                return not await admin.list_partition_reassignments([tp0, tp1])
            await _until(done, 120, "both throttled moves to finish")
            elapsed = time.monotonic() - started
            stop.set()
        assert elapsed >= 0.5 * size / RATE, (elapsed, size)
        assert partial == {0, 1}, "a move was never seen part-way: no steady progress"
        assert counts.get(0, 0) > 10 and counts.get(1, 0) > 10       # producing went on
        # every acknowledged record is in the moved partitions
        ends = await admin.list_offsets({tp0: LATEST, tp1: LATEST})
        assert ends[tp0][0] == records + counts[0] and ends[tp1][0] == records + counts[1]
        d = (await admin.describe_topics([topic]))[topic]
        assert [list(p.replicas) for p in d.partitions] == [[0, 2], [0, 2]]
    # each side metered what it throttled and held the new replica back at times
    follower, leader = _metrics(live, 2), _metrics(live, 0)
    assert follower['raftka_replication_throttle_rate_bytes{side="follower"}'] == RATE
    assert follower['raftka_replication_throttled_bytes_total{side="follower"}'] >= size
    assert follower['raftka_replication_throttle_held_back_total{side="follower"}'] > 0
    assert leader['raftka_replication_throttled_bytes_total{side="leader"}'] >= size
    assert leader['raftka_replication_throttle_held_back_total{side="leader"}'] > 0


async def test_live_moves_no_topic_throttle_lists_copy_at_the_reassignment_rate(live):
    """`raftka.reassignment.throttled.rate` bounds a move that no topic throttle lists — as the
    balancer's and re-replication's are. Set on broker 1 only: a move off it is held back on
    its leader side, the move back onto it on its follower side."""
    records = 3000
    key = "raftka.reassignment.throttled.rate"
    b1 = ConfigResource(ConfigResourceType.BROKER, "1")
    async with AdminClient(live.bootstrap) as admin:
        topic = await _topic(admin, {0: [1]}, records)
        tp = TopicPartition(topic, 0)
        bad = await admin.incremental_alter_configs({b1: [AlterConfigOp(key, "0")]})
        assert bad[b1].error_code == ErrorCode.INVALID_CONFIG
        assert await admin.incremental_alter_configs({b1: [AlterConfigOp(key, str(RATE))]}) \
            == {b1: None}
        try:
            await _until(lambda: _broker_has(admin, 1, key, str(RATE)), 30, "the rate")
            size = (await admin.describe_replica_log_dirs([1], [tp]))[1][tp][0]
            assert size >= records * 1000
            for target, side in ((2, "leader"), (1, "follower")):
                held = _metrics(live, 1)[
                    f'raftka_replication_throttle_held_back_total{{side="{side}"}}']
                elapsed, partial = await _move(admin, tp, target, size)
                assert elapsed >= 0.5 * size / RATE, (side, elapsed, size)
                assert partial, f"{side} side: never seen part-way, no steady progress"
                # held back on broker 1's side of the copy: an unthrottled move never is
                assert _metrics(live, 1)[
                    f'raftka_replication_throttle_held_back_total{{side="{side}"}}'] > held
            assert (await admin.list_offsets({tp: LATEST}))[tp][0] == records
        finally:
            assert await admin.incremental_alter_configs({b1: [
                AlterConfigOp(key, None, AlterConfigOpType.DELETE)]}) == {b1: None}


async def _move(admin, tp, target: int, size: int):
    """Move `tp` to [target]; (seconds taken, sizes seen part-way on the target)."""
    started, partial = time.monotonic(), []
    assert await admin.alter_partition_reassignments({tp: [target]}) == {tp: None}

    async def done():
        sizes = await admin.describe_replica_log_dirs([target], [tp])
        got = sizes[target]
        copied = got.get(tp, (0, 0))[0] if isinstance(got, dict) else 0
        if 0.1 * size < copied < 0.9 * size:
            partial.append(copied)
        return not await admin.list_partition_reassignments([tp])
    await _until(done, 120, f"the move to {target} to finish")
    return time.monotonic() - started, partial


def _metrics(live, broker: int) -> dict[str, float]:
    port = live.layout.metrics_port(broker)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("raftka_replication_throttle")}


# -- the CLI ------------------------------------------------------------------------------------------

@pytest.fixture
def cli(live, capsys):
    def call(*argv):
        capsys.readouterr()
        try:
            code = main(["reassign", *argv, "--bootstrap-server", live.bootstrap])
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        assert "Traceback" not in err, err
        return code, out, err
    return call


def _write(path, obj) -> str:
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(path)


def _configs(live, topic: str):
    async def run():
        async with AdminClient(live.bootstrap) as admin:
            t = ConfigResource(ConfigResourceType.TOPIC, topic)
            brokers = {}
            for b in (0, 1, 2):
                res = ConfigResource(ConfigResourceType.BROKER, str(b))
                brokers[b] = {e.name: e.value for e in (await admin.describe_configs([res]))[res]
                              if e.source == "DYNAMIC_BROKER_CONFIG"}
            topic_cfg = {e.name: e.value for e in (await admin.describe_configs([t]))[t]
                         if e.source == "DYNAMIC_TOPIC_CONFIG"}
            return brokers, topic_cfg
    return trio.run(run)


def test_live_reassign_cli_generate_execute_watch_verify(live, cli, tmp_path):
    async def setup():
        async with AdminClient(live.bootstrap) as admin:
            return await _topic(admin, {0: [0], 1: [0]}, 1000)
    topic = trio.run(setup)
    topics = _write(tmp_path / "topics.json", {"version": 1, "topics": [{"topic": topic}]})

    code, out, err = cli("generate", "--topics-to-move-json-file", topics, "--broker-list", "1,2")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1])["partitions"] == [
        {"topic": topic, "partition": p, "replicas": [0], "log_dirs": ["any"]} for p in (0, 1)]
    assert lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])
    assert sorted(e["replicas"][0] for e in proposed["partitions"]) == [1, 2]
    plan = _write(tmp_path / "plan.json", lines[4])

    # bad plans: an unknown broker (refused by the cluster's view), a duplicate replica
    unknown = _write(tmp_path / "unknown.json", {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 7]}]})
    code, _, err = cli("execute", "--reassignment-json-file", unknown)
    assert code == 1 and "unknown broker(s) [7]" in err
    dup = _write(tmp_path / "dup.json", {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 1]}]})
    code, _, err = cli("execute", "--reassignment-json-file", dup)
    assert code == 2 and "duplicate replica" in err
    code, _, err = cli("execute", "--reassignment-json-file", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read" in err

    code, out, err = cli("execute", "--reassignment-json-file", plan, "--throttle", "200000",
                         "--watch", "--interval", "0.3")
    assert code == 0, err
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert "The inter-broker throttle limit was set to 200000 B/s" in out
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in out
    assert "copied" in out and "%" in out and out.rstrip().endswith(
        "run verify to check them and remove the throttles.")
    brokers, topic_cfg = _configs(live, topic)
    assert all(brokers[b]["leader.replication.throttled.rate"] == "200000" for b in (0, 1, 2))
    assert topic_cfg["leader.replication.throttled.replicas"] == "0:0,1:0"

    code, out, err = cli("verify", "--reassignment-json-file", plan, "--watch", "--output",
                         "json")
    assert code == 0, err
    samples = [json.loads(x) for x in out.splitlines()]
    assert samples[0]["in_progress"] is False and samples[-1]["complete"] is True
    assert samples[-1]["throttles_removed"] is True
    assert {(p["partition"], p["state"]) for p in samples[-1]["partitions"]} == \
        {(0, "complete"), (1, "complete")}
    brokers, topic_cfg = _configs(live, topic)
    assert not any("throttled" in k for b in brokers.values() for k in b), brokers
    assert not any("throttled" in k for k in topic_cfg), topic_cfg

    code, out, err = cli("verify", "--reassignment-json-file", plan, "--preserve-throttles")
    assert code == 0 and f"Reassignment of partition {topic}-0 is completed." in out
    code, out, err = cli("cancel", "--reassignment-json-file", plan, "--preserve-throttles")
    assert code == 0 and "None of the specified partition reassignments are active." in out


def test_live_kafka_python_describe_log_dirs(live):
    """A real client's DescribeLogDirs (kafka-python 3 picks the highest version both support)."""
    from kafka.admin import KafkaAdminClient

    async def setup():
        async with AdminClient(live.bootstrap) as admin:
            return await _topic(admin, {0: [1, 2]}, 50)
    topic = trio.run(setup)
    admin = KafkaAdminClient(bootstrap_servers=live.bootstrap)
    try:
        deadline = time.monotonic() + 30
        while True:                      # the follower copies the records on its own time
            sizes = _log_dir_sizes(admin.describe_log_dirs({topic: [0]}, brokers=[0, 1, 2]))
            if all(size >= 50 * 1000 for size in sizes.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        admin.close()
    assert set(sizes) == {(1, topic, 0), (2, topic, 0)}
    assert all(size >= 50 * 1000 for size in sizes.values()), sizes


def _log_dir_sizes(answers) -> dict:
    sizes = {}
    for answer in answers:
        for result in answer["log_dirs"]:
            assert result["error_code"] == 0
            assert result["log_dir"].endswith(f"broker-{answer['broker']}")
            for t in result["topics"]:
                for p in t["partitions"]:
                    sizes[(answer["broker"], t["name"], p["partition_index"])] = \
                        p["partition_size"]
    return sizes
