"""A broker answers nothing before its first metadata catch-up (as Kafka's broker does): a
Metadata answer from its empty image would name no brokers and send clients astray (kafka-python
drops such an answer and keeps producing to a stale leader)."""

import signal
import sys
import time

import pytest
import trio

from clients.cli.dev import CONTROLLER_IDS, DevLayout, ManagedProcess, write_properties
from partition_server.testing import free_base_port
from partition_server.tests.test_security_network import connect
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

pytestmark = pytest.mark.live


def test_requests_wait_for_the_first_metadata_catch_up(tmp_path):
    layout = DevLayout(tmp_path, free_base_port())
    procs = []

    def start(name, module, props):
        path = tmp_path / "configs" / f"{name}.properties"
        write_properties(path, props)
        procs.append(ManagedProcess(name, [sys.executable, "-m", module, "--config", str(path)],
                                    "listening on" if module == "metadata_quorum" else "unfenced",
                                    True, layout.log_path(name)))
        return procs[-1]

    async def metadata(timeout_s):
        deadline = time.monotonic() + 60      # until the listener is up (a loaded start is slow)
        while True:
            try:
                client = await connect(layout.broker_port(0))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await trio.sleep(0.1)
        try:
            with trio.move_on_after(timeout_s):
                return await client.call(REQUESTS[ApiKey.METADATA](topics=None), 12)
            return None
        finally:
            await client.stream.aclose()

    try:
        start("broker-0", "partition_server", layout.broker_properties(0))
        # no controller yet: the broker listens but cannot catch up, so it must not answer
        assert trio.run(metadata, 3.0) is None
        for i, cid in enumerate(CONTROLLER_IDS):
            start(f"controller-{cid}", "metadata_quorum", layout.controller_properties(i))
        t0 = time.monotonic()
        answer = trio.run(metadata, 60.0)
        assert answer is not None, "no answer after the controllers came up"
        # caught up, the broker is registered but still fenced until its next heartbeat, and
        # Metadata lists unfenced brokers only (as Kafka's broker, which also opens its
        # listeners between catch-up and unfencing); on a loaded machine an answer can come
        # in between: then the next ones name it
        while [b.node_id for b in answer.brokers] != [0] and time.monotonic() - t0 < 60:
            time.sleep(0.2)
            answer = trio.run(metadata, 10.0)
            assert answer is not None, "a caught-up broker stopped answering"
        assert [b.node_id for b in answer.brokers] == [0]
        assert time.monotonic() - t0 < 60
    finally:
        for p in procs:
            p.stop(10)


def test_a_restarted_broker_answers_from_its_caught_up_image_only(tmp_path):
    """Found by the chaos campaign at 10,000 partitions (issue 17): "caught up" is what the
    broker has replayed, and it then opens thousands of logs ahead of applying that image.
    Requests were served meanwhile from the image before it — empty after a restart — so a
    Metadata answer named no topics and librdkafka refused to produce ("Unknown topic").
    Every answer of a restarted broker now names every topic, and it is unfenced only once it
    serves (Kafka's readyToUnfence)."""
    import threading

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from partition_server.testing import LiveCluster
    # a short stream tail: the restarted broker loads a metadata snapshot (the path where the
    # replayed image waited longest behind opening the logs)
    cluster = LiveCluster(tmp_path, {"raftka.controller.raft.log.compaction.min.entries": "20",
                                     "raftka.controller.stream.tail.records": "100"}).start()
    try:
        names = [f"many-{i}" for i in range(30)]
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for fut in admin.create_topics([NewTopic(n, 100, 3) for n in names],
                                       operation_timeout=60).values():
            fut.result(60)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 50})
        for n in names:                 # a record in every partition: every log has files
            for p in range(100):
                producer.produce(n, b"x", partition=p)
        assert producer.flush(120) == 0
        dumps = [tmp_path / f"controller-{cid}" / "raft.dump" for cid in CONTROLLER_IDS]
        deadline = time.monotonic() + 120
        while not all(d.exists() for d in dumps):       # compacted: the snapshot path below
            assert time.monotonic() < deadline, "no Raft log compaction"
            time.sleep(0.2)
        port = cluster.layout.broker_port(1)
        cluster.kill("broker-1", signal.SIGTERM)
        restarted = threading.Thread(target=cluster.restart_broker, args=(1, 120))
        restarted.start()
        answers = trio.run(_metadata_answers_while, restarted.is_alive, port)
        restarted.join()
        assert answers, "the restarted broker never answered Metadata"
        wrong = [a for a in answers if a != set(names)]
        assert not wrong, f"{len(wrong)} of {len(answers)} answers lacked topics: " \
                          f"{sorted(len(a) for a in wrong)[:5]} of {len(names)}"
        assert cluster.unexpected_exits() == []
    finally:
        cluster.stop()


async def _metadata_answers_while(starting, port) -> list[set]:
    """Every Metadata answer (its topic names) from the broker at `port`, asked again and
    again while `starting()` and once after."""
    answers = []
    while True:
        last = not starting()
        try:
            client = await connect(port)
        except OSError:
            if last:
                return answers
            await trio.sleep(0.02)
            continue
        try:
            while True:
                with trio.move_on_after(1.0):
                    resp = await client.call(REQUESTS[ApiKey.METADATA](topics=None), 12)
                    answers.append({t.name for t in resp.topics if t.name.startswith("many-")})
                if last:
                    return answers
                last = not starting()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, EOFError):
            await trio.sleep(0.02)
        finally:
            await client.stream.aclose()
