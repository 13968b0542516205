"""A transaction request that waited (for the previous transaction's markers, for the id's
lock) asks again whether this broker still coordinates the id before it answers.

Found by the chaos campaign at scale: a broker whose log directory failed was still the
coordinator when an AddPartitionsToTxn arrived, which waited for markers that could not be
written; meanwhile the state partition went offline and its transactions were unloaded, and the
waiting request then answered from the empty state, INVALID_PRODUCER_ID_MAPPING: an abortable
error that needs an epoch bump, for a producer that had done nothing wrong (librdkafka then
failed the transaction). NOT_COORDINATOR sends the client to the new coordinator."""

from __future__ import annotations

import trio

from partition_server.tests.test_txn_complete import (TXN_TOPIC, Cluster, start_transaction,
                                                       wait_for)
from wire.errors import ErrorCode


def lose_the_state_partition(c: Cluster) -> None:
    """Broker 2 leads `__transaction_state-0` now, in a new leader epoch."""
    c.replicas.apply_partition(TXN_TOPIC, c.ids[TXN_TOPIC], 0, [1, 2], [1, 2], 2, 1, 1, {}, 1, 0)
    c.txn.on_image()


async def test_requests_that_waited_ask_again_whether_the_id_is_still_ours(tmp_path):
    c = Cluster(tmp_path)
    txn = c.txn
    async with trio.open_nursery() as nursery:
        pid, epoch = await start_transaction(c, nursery)

        # the previous transaction's markers are still being written (held by the test)
        markers_done = txn.completing["tx"] = trio.Event()
        answers = {}

        async def ask(name, call):
            answers[name] = await call()

        nursery.start_soon(ask, "add", lambda: txn.add_partitions("tx", pid, epoch, [("t", 0)]))
        nursery.start_soon(ask, "init", lambda: txn.init_producer_id("tx", 60000, pid, epoch))
        await trio.testing.wait_all_tasks_blocked()
        assert answers == {}                           # both wait for the markers

        # and an EndTxn waits for the id's lock, held by a request whose append hangs
        async with txn._lock("tx"):
            nursery.start_soon(ask, "end", lambda: txn.end_txn("tx", pid, epoch, True))
            await trio.testing.wait_all_tasks_blocked()
            lose_the_state_partition(c)
            assert "tx" not in txn.txns                # unloaded with the partition
            markers_done.set()
        await wait_for(lambda: len(answers) == 3)
        assert answers["add"] == ErrorCode.NOT_COORDINATOR
        assert answers["init"] == (ErrorCode.NOT_COORDINATOR, -1, -1)
        assert answers["end"] == (ErrorCode.NOT_COORDINATOR, -1, -1)
        nursery.cancel_scope.cancel()

