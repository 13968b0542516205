"""Brokers come and go (issue 19 item 4), live: a fourth broker joins a running 3 + 3 cluster
through `raftka dev --add-broker 3`, then `raftka cluster decommission --broker 0` drains broker
0 while our producer writes with acks=all: every partition ends with its 3 replicas on the
remaining brokers, broker 0 deletes its logs and leaves Metadata (UnregisterBroker), and every
acknowledged record is read back exactly once. Every wait is a condition with a deadline."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import uuid

import pytest
import trio

from clients.admin import AdminClient, NewTopic
from clients.cli.main import main
from clients.cluster import TopicPartition
from clients.consumer import Consumer
from clients.producer import Producer
from partition_server.testing import LiveCluster

PARTITIONS = 4


async def _until(check, timeout_s: float, what: str):
    last = None
    with trio.move_on_after(timeout_s):
        while True:
            last = await check()
            if last:
                return last
            await trio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last: {last!r}")


def _join(data_dir, broker_id: int) -> tuple[subprocess.Popen, threading.Event]:
    """`raftka dev --add-broker` in its own process; the event is set at its 'joined' line."""
    proc = subprocess.Popen([sys.executable, "-m", "clients.cli.main", "dev", "--data-dir",
                             str(data_dir), "--add-broker", str(broker_id), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    joined = threading.Event()

    def pump():
        for line in proc.stdout:
            if f"broker {broker_id} joined" in line:
                joined.set()
    threading.Thread(target=pump, daemon=True).start()
    return proc, joined


async def _partitions(admin, topics):
    await admin.cluster.refresh_metadata(topics, force=True)
    desc = await admin.describe_topics(topics)
    return {TopicPartition(t, p.partition): p for t in topics for p in desc[t].partitions}


async def _drained(admin, topics):
    if await admin.list_partition_reassignments():
        return False
    parts = await _partitions(admin, topics)
    return all(len(p.replicas) == 3 and 0 not in p.replicas and sorted(p.isr) ==
               sorted(p.replicas) for p in parts.values()) and parts


@pytest.mark.live
async def test_live_join_then_decommission_under_acks_all_load(tmp_path, capsys):
    live = LiveCluster(tmp_path / "cluster", brokers=3, spare_brokers=1)
    live.start()
    joiner = None
    try:
        joiner, joined = _join(live.layout.data_dir, 3)
        assert await trio.to_thread.run_sync(joined.wait, 60), "broker 3 did not join"
        async with AdminClient(live.bootstrap) as admin:
            async def four():
                ids = [b["id"] for b in (await admin.describe_cluster())["brokers"]]
                return ids == [0, 1, 2, 3]
            await _until(four, 30, "broker 3 in Metadata")
            topics = [f"dec-{uuid.uuid4().hex[:6]}" for _ in range(2)]
            assert await admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in topics]) == \
                {t: None for t in topics}

            async def in_sync():
                parts = await _partitions(admin, topics)
                return all(sorted(p.isr) == sorted(p.replicas) for p in parts.values())
            await _until(in_sync, 30, "new topics in sync")
            before = await _partitions(admin, topics)
            assert {3} & {b for p in before.values() for b in p.replicas}, "3 got no replicas"
            on_zero = sum(0 in p.replicas for p in before.values())
            assert on_zero > 0

            acked, failed = await _decommission_under_load(admin, live, topics, capsys)
            assert not failed, failed[:3]
            parts = await _until(lambda: _drained(admin, topics), 60, "RF 3 without broker 0")
            assert all(set(p.replicas) <= {1, 2, 3} for p in parts.values())
            ids = [b["id"] for b in (await admin.describe_cluster())["brokers"]]
            assert ids == [1, 2, 3]                     # unregistered: gone from Metadata

            # DescribeLogDirs: every broker left hosts its replicas' logs, with their sizes
            dirs = await admin.describe_replica_log_dirs([1, 2, 3])
            sizes = {b: {tp: size for tp, (size, _) in dirs[b].items()} for b in dirs}
            for b in (1, 2, 3):
                mine = {tp for tp, p in parts.items() if b in p.replicas}
                assert mine <= set(sizes[b]) and sum(sizes[b][tp] for tp in mine) > 0
            broker0 = live.layout.data_dir / "broker-0"

            async def logs_gone():
                return not any(d.name.startswith(tuple(topics)) for d in broker0.iterdir())
            await _until(logs_gone, 30, "broker 0 to delete its logs")
        got = await _read_all(live, list(parts), len(acked))
        for key in acked:
            assert got.count(key) == 1, (key, got.count(key))
        code = await trio.to_thread.run_sync(
            main, ["cluster", "describe", "--output", "json", "--bootstrap-server", live.bootstrap])
        rows = json.loads(capsys.readouterr().out)["brokers"]
        assert code == 0 and [r["id"] for r in rows] == [1, 2, 3]
        assert [r["bytes"] for r in rows] == [sum(sizes[b].values()) for b in (1, 2, 3)]
        assert await trio.to_thread.run_sync(_kafka_python_sizes, live.bootstrap, 1) == sizes[1]
    finally:
        if joiner is not None:
            joiner.send_signal(signal.SIGTERM)
            try:
                joiner.wait(60)
            except subprocess.TimeoutExpired:
                joiner.kill()
        live.stop()


async def _decommission_under_load(admin, live, topics, capsys):
    """Produce keyed records (acks=all) across the topics while `raftka cluster decommission
    --broker 0` runs; returns (acknowledged keys, failures)."""
    acked: list[bytes] = []
    failed: list = []
    stop = trio.Event()

    def note(key, exc):
        (failed if exc is not None else acked).append(exc if exc is not None else key)

    async def produce(p):
        i = 0
        while not stop.is_set():
            key = b"k%d" % i
            await p.send(topics[i % 2], b"v%d" % i, key=key,
                         on_delivery=lambda m, e, key=key: note(key, e))
            i += 1
            if i % 20 == 0:
                await trio.sleep(0.01)
        await p.flush()

    async with Producer(admin.cluster, {"acks": "all"}) as p:
        async with trio.open_nursery() as n:
            n.start_soon(produce, p)
            await _until(lambda: _true(len(acked) >= 200), 30, "the load to start")
            capsys.readouterr()
            code = await trio.to_thread.run_sync(main, [
                "cluster", "decommission", "--broker", "0", "--timeout-s", "90",
                "--bootstrap-server", live.bootstrap])
            out, err = capsys.readouterr()
            assert code == 0, err
            assert "Broker 0 holds no replicas; unregistered." in out, out
            assert "remaining" in out and " on it)" in out      # bytes left on broker 0
            settled = len(acked)
            await _until(lambda: _true(len(acked) > settled + 200), 30, "writes after it")
            stop.set()
    return acked, failed


async def _true(value):
    return value


async def _read_all(live, tps, count: int) -> list[bytes]:
    """Every key from offset 0 of `tps`, until `count` arrived, then one more poll."""
    async with Consumer(live.bootstrap, {"enable.auto.commit": "false"}) as c:
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        got: list[bytes] = []

        async def read():
            got.extend(r.key for r in await c.poll(500))
            return len(got) >= count
        await _until(read, 60, "every acknowledged record")
        got.extend(r.key for r in await c.poll(300))
    return got


@pytest.mark.live
async def test_live_decommission_rides_out_a_controller_failover(tmp_path, capsys):
    """The active controller is SIGKILLed just before the command starts: its first calls meet
    an election (NOT_CONTROLLER, timeouts) and retry; the killed controller restarts while it
    runs. The drain finishes on the new controller and no record is lost. (A controller kill
    with moves in flight: clients/tests/test_reassignment_live.py.)"""
    with LiveCluster(tmp_path / "cluster", brokers=4) as live:
        async with AdminClient(live.bootstrap) as admin:
            topic = f"dec-{uuid.uuid4().hex[:6]}"
            layout = {p: [0, 1, 2] for p in range(PARTITIONS)}
            assert await admin.create_topics([NewTopic(topic, replica_assignment=layout)]) == \
                {topic: None}

            async def in_sync():
                parts = await _partitions(admin, [topic])
                return len(parts) == PARTITIONS and all(
                    sorted(p.isr) == [0, 1, 2] for p in parts.values())
            await _until(in_sync, 30, "the topic in sync")
            async with Producer(admin.cluster, {"acks": "all"}) as p:
                for i in range(200):
                    await p.send(topic, b"v%d" % i, key=b"k%d" % i)
                await p.flush()
            active = (await admin.describe_quorum())["leader_id"]
            live.kill(f"controller-{active}")
            result = {}

            def decommission():
                result["code"] = main(["cluster", "decommission", "--broker", "0",
                                       "--timeout-s", "90", "--bootstrap-server", live.bootstrap])
            async with trio.open_nursery() as n:
                n.start_soon(trio.to_thread.run_sync, decommission)
                await trio.to_thread.run_sync(live.restart_controller,
                                              [3000, 3001, 3002].index(active))
            out, err = capsys.readouterr()
            assert result["code"] == 0, err
            assert "Broker 0 holds no replicas; unregistered." in out
            parts = await _until(lambda: _drained(admin, [topic]), 60, "RF 3 without broker 0")
            assert all(sorted(p.replicas) == [1, 2, 3] for p in parts.values())
        got = await _read_all(live, list(parts), 200)
        assert sorted(got) == sorted(b"k%d" % i for i in range(200))


def _kafka_python_sizes(bootstrap: str, broker: int) -> dict:
    """kafka-python's describe_log_dirs of one broker, as {TopicPartition: bytes}."""
    from kafka.admin import KafkaAdminClient
    k = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        answer = k.describe_log_dirs(brokers=[broker])
    finally:
        k.close()
    return {TopicPartition(t["name"], p["partition_index"]): p["partition_size"]
            for entry in answer if entry["broker"] == broker
            for d in entry["log_dirs"] for t in d["topics"] for p in t["partitions"]}
