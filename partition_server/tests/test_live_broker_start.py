"""A broker answers nothing before its first metadata catch-up (as Kafka's broker does): a
Metadata answer from its empty image would name no brokers and send clients astray (kafka-python
drops such an answer and keeps producing to a stale leader)."""

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
