"""The producer's transactional calls (KIP-98, with KIP-890 part 2's EndTxn v5).

`Transactions` is a collaborator of `Producer` (producer.py), which delegates its public
transactional methods here: the calls to the transaction and group coordinators
(InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn). The state
machine they drive is transaction_manager.py (pure); the sender's gate (nothing sent in an
error state, new partitions added first) is in sender.py and calls `add_partitions`.

What it is given: the cluster (to find coordinators), the state machine, the producer id and
epoch (it sets them: InitProducerId, EndTxn v5), the config's timeouts, and three calls into
the sending half: `flush` (wait for what was sent), `fail_unsent` (abort: what was not sent
fails at once) and `wake` (a state change the sender loop must see).
"""

from __future__ import annotations

from typing import Awaitable, Callable

import trio

from clients.cluster import COORDINATOR_GROUP, COORDINATOR_TRANSACTION, Cluster, TopicPartition
from clients.errors import KafkaConnectionError, KafkaTimeoutError, Retry, classify, error
from clients.producer.idempotence import ProducerIdAndEpoch
from clients.producer.transaction_manager import (State, TransactionAbortedError,
                                                  TransactionManager, TransactionStateError,
                                                  is_fatal)
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

INIT_PRODUCER_ID = REQUESTS[ApiKey.INIT_PRODUCER_ID]
ADD_PARTITIONS_TO_TXN = REQUESTS[ApiKey.ADD_PARTITIONS_TO_TXN]
ADD_OFFSETS_TO_TXN = REQUESTS[ApiKey.ADD_OFFSETS_TO_TXN]
END_TXN = REQUESTS[ApiKey.END_TXN]
TXN_OFFSET_COMMIT = REQUESTS[ApiKey.TXN_OFFSET_COMMIT]


class Transactions:
    """The transactional calls of one producer (see the module docstring)."""

    def __init__(self, cluster: Cluster, txn: TransactionManager, ids: ProducerIdAndEpoch,
                 config, *, flush: Callable[[], Awaitable[None]],
                 fail_unsent: Callable[[Exception], None], wake: Callable[[], None]):
        self.cluster = cluster
        self._txn = txn
        self.ids = ids
        self._flush = flush
        self._fail_unsent = fail_unsent
        self._wake = wake
        self._backoff_s = config["retry.backoff.ms"] / 1000
        self._max_block_s = config["max.block.ms"] / 1000
        self._delivery_timeout_s = config["delivery.timeout.ms"] / 1000

    async def init_transactions(self, timeout_s: float | None = None) -> None:
        """Get this transactional.id's producer id and epoch from its coordinator, fencing any
        older instance (its open transaction is aborted by the coordinator first)."""
        txn = self._txn
        txn.start_init()
        try:
            await self._txn_init_pid(bump=False, timeout_s=timeout_s)
        except BaseException as exc:
            if is_fatal(exc):
                txn.set_fatal(exc)
            else:
                txn.init_failed()
            raise
        txn.init_done()

    async def begin_transaction(self) -> None:
        self._txn.begin()

    async def send_offsets_to_transaction(self, offsets, group_metadata_or_group_id,
                                          timeout_s: float | None = None) -> None:
        """Commit consumed offsets as part of the transaction (consume-transform-produce).
        `offsets`: {TopicPartition or (topic, partition): next offset to read (int, or
        (offset, metadata))}, or an iterable of objects with topic/partition/offset (such as
        confluent-kafka's TopicPartition). `group_metadata_or_group_id`: the group id, or a
        consumer's group metadata (group_id, generation_id, member_id, group_instance_id)."""
        txn = self._txn
        txn.check_can_add_offsets()
        group = group_metadata_or_group_id
        if isinstance(group, str):
            group_id, generation, member, instance = group, -1, "", None
        else:
            group_id = getattr(group, "group_id", None)
            if not group_id:
                raise TransactionStateError("send_offsets_to_transaction: no group id given")
            # our Consumer: its group membership fences offsets of a member that was kicked out
            src = getattr(group, "member", None) or group
            generation = getattr(src, "generation_id", getattr(src, "generation", -1))
            member = getattr(src, "member_id", "") or ""
            instance = getattr(src, "group_instance_id", getattr(group, "group_instance_id", None))
            if not isinstance(generation, int):
                generation = -1
        by_topic: dict[str, list] = {}
        for topic, partition, offset, meta in offset_entries(offsets):
            by_topic.setdefault(topic, []).append(TXN_OFFSET_COMMIT.TxnOffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=meta))
        tid = txn.transactional_id
        try:
            await self._coordinator_call(
                lambda: ADD_OFFSETS_TO_TXN(transactional_id=tid, producer_id=self.ids.producer_id,
                                           producer_epoch=self.ids.producer_epoch,
                                           group_id=group_id),
                lambda r: r.error_code, "AddOffsetsToTxn", timeout_s=timeout_s)
            txn.offsets_added = True

            def first_error(resp):
                for t in resp.topics:
                    for p in t.partitions:
                        if p.error_code:
                            return p.error_code
                return 0
            await self._coordinator_call(
                lambda: TXN_OFFSET_COMMIT(
                    transactional_id=tid, group_id=group_id, producer_id=self.ids.producer_id,
                    producer_epoch=self.ids.producer_epoch, generation_id=generation,
                    member_id=member, group_instance_id=instance,
                    topics=[TXN_OFFSET_COMMIT.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                            for t, ps in by_topic.items()]),
                first_error, "TxnOffsetCommit", key_type=COORDINATOR_GROUP, key=group_id,
                timeout_s=timeout_s)
        except KafkaError as exc:
            self._txn_failed(exc)
            raise

    async def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Flush every record of the transaction, then commit it (EndTxn). Raises if any record
        failed: the transaction must then be aborted. After a timeout, calling it again resumes."""
        txn = self._txn
        if txn.state is not State.COMMITTING:
            txn.begin_commit()
        self._wake()
        await self._flush_within(timeout_s, "commit_transaction")
        if txn.in_error:
            txn._raise_if_fatal()
            raise TransactionAbortedError(
                f"commit failed, abort the transaction: {txn.last_error}", None) \
                from txn.last_error
        if txn.started:
            await self._end_txn(True, timeout_s)
        txn.end_done()

    async def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Abort: records not sent yet fail with TransactionAbortedError, those in flight are
        awaited, then EndTxn(abort). Also the way out of an abortable error."""
        txn = self._txn
        txn.begin_abort()
        self._wake()
        self._fail_unsent(TransactionAbortedError("transaction aborted before the record was "
                                                  "sent"))
        await self._flush_within(timeout_s, "abort_transaction")
        # an AddPartitionsToTxn still in flight (its records just failed unsent): EndTxn must
        # follow its answer, or the coordinator may see EndTxn first (INVALID_TXN_STATE)
        with trio.move_on_after(self._max_block_s if timeout_s is None else timeout_s):
            while txn.adding:
                await trio.sleep(0.005)
        if txn.started and await self._end_txn(False, timeout_s):
            txn.needs_epoch_bump = False      # EndTxn v5 bumped it already, sequences reset
        if txn.needs_epoch_bump:
            # a batch with a sequence number failed: bump the epoch so sequences start over
            # (KIP-360); our current producer id and epoch prove we are not a zombie
            try:
                await self._txn_init_pid(bump=True, timeout_s=timeout_s)
            except KafkaError as exc:
                if is_fatal(exc):
                    txn.set_fatal(exc)
                raise
            txn.needs_epoch_bump = False
        txn.end_done()

    async def _flush_within(self, timeout_s: float | None, what: str) -> None:
        limit = self._max_block_s if timeout_s is None else timeout_s
        with trio.move_on_after(limit):
            await self._flush()
            return
        raise KafkaTimeoutError(f"{what}: records still unacknowledged after {limit:g} s; "
                                "call it again to keep waiting")

    def _txn_failed(self, exc: BaseException) -> None:
        if self._txn is not None:
            if is_fatal(exc):
                self._txn.set_fatal(exc)
            else:
                self._txn.set_abortable(exc)

    async def _end_txn(self, commit: bool, timeout_s: float | None) -> bool:
        """EndTxn; True when the coordinator bumped the epoch with it (v5)."""
        txn = self._txn
        try:
            resp = await self._coordinator_call(
                lambda: END_TXN(transactional_id=txn.transactional_id,
                                producer_id=self.ids.producer_id,
                                producer_epoch=self.ids.producer_epoch, committed=commit),
                lambda r: r.error_code, "EndTxn", max_version=5, timeout_s=timeout_s)
            if resp.producer_id >= 0 and resp.producer_epoch >= 0:
                # EndTxn v5 (KIP-890 part 2): the coordinator bumped the epoch with this
                # transaction (a new id at epoch overflow); our next transaction uses it, from
                # sequence 0, and a late retry of this one's batches is fenced
                self.ids.reset(resp.producer_id, resp.producer_epoch)
                return True
            return False
        except KafkaError as exc:
            if is_fatal(exc):
                txn.set_fatal(exc)
            elif commit:
                txn.set_abortable(exc)
            raise

    async def _txn_init_pid(self, bump: bool, timeout_s: float | None) -> None:
        txn = self._txn
        resp = await self._coordinator_call(
            lambda: INIT_PRODUCER_ID(transactional_id=txn.transactional_id,
                                     transaction_timeout_ms=txn.transaction_timeout_ms,
                                     producer_id=self.ids.producer_id if bump else -1,
                                     producer_epoch=self.ids.producer_epoch if bump else -1),
            lambda r: r.error_code, "InitProducerId", timeout_s=timeout_s)
        self.ids.reset(resp.producer_id, resp.producer_epoch)

    async def _coordinator_call(self, make, code_of, what: str, *,
                                key_type: int = COORDINATOR_TRANSACTION, key: str | None = None,
                                max_version: int | None = None, timeout_s: float | None = None):
        """One request to the transaction (or group) coordinator, retried until `timeout_s`
        (default max.block.ms) on retriable errors: NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE
        find the coordinator again, COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS
        wait and retry. Anything else raises its typed error."""
        key = key or self._txn.transactional_id
        deadline = trio.current_time() + (self._max_block_s if timeout_s is None else timeout_s)
        while True:
            err: Exception
            code = None
            try:
                node = await self.cluster.find_coordinator(
                    key, key_type, timeout_s=max(0.5, deadline - trio.current_time()))
                resp = await self.cluster.call(node, make(), max_version=max_version)
                code = code_of(resp)
                if code == 0:
                    return resp
                err = error(code, None, what)
                if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self.cluster.forget_coordinator(key, key_type)
                elif classify(code) is Retry.NO:
                    raise err
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                self.cluster.forget_coordinator(key, key_type)
                err = exc
            now = trio.current_time()
            if now >= deadline:
                raise KafkaTimeoutError(f"{what} did not succeed in time: {err}")
            # Java retries CONCURRENT_TRANSACTIONS quickly: the previous transaction's markers
            # usually land within milliseconds
            pause = min(self._backoff_s, 0.02) if code == ErrorCode.CONCURRENT_TRANSACTIONS \
                else self._backoff_s
            await trio.sleep(min(pause, max(0.0, deadline - now)))

    async def add_partitions(self, tps: list[TopicPartition]) -> None:
        """AddPartitionsToTxn for the partitions the sender found pending (one request per
        drain); a failure makes the transaction abortable (or fatal)."""
        txn = self._txn
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        def first_error(resp):
            worst = 0
            for t in resp.results_by_topic_v3_and_below:
                for p in t.results_by_partition:
                    c = p.partition_error_code
                    if c and c != ErrorCode.OPERATION_NOT_ATTEMPTED:
                        return c
                    worst = worst or c
            return worst
        try:
            await self._coordinator_call(
                lambda: ADD_PARTITIONS_TO_TXN(
                    v3_and_below_transactional_id=txn.transactional_id,
                    v3_and_below_producer_id=self.ids.producer_id,
                    v3_and_below_producer_epoch=self.ids.producer_epoch,
                    v3_and_below_topics=[ADD_PARTITIONS_TO_TXN.AddPartitionsToTxnTopic(
                        name=t, partitions=ps) for t, ps in by_topic.items()]),
                first_error, "AddPartitionsToTxn", max_version=3,
                timeout_s=self._delivery_timeout_s)
        except KafkaError as exc:
            # the coordinator may or may not have them: keep them counted so abort ends it
            txn.partitions_added(tps)
            self._txn_failed(exc)
        else:
            txn.partitions_added(tps)


def offset_entries(offsets):
    """(topic, partition, offset, metadata) from the shapes send_offsets_to_transaction takes."""
    items = offsets.items() if isinstance(offsets, dict) else [(o, o) for o in offsets]
    for tp, value in items:
        if isinstance(tp, tuple):
            topic, partition = tp[0], tp[1]
        else:
            topic, partition = tp.topic, tp.partition
        meta = None
        if isinstance(value, int):
            offset = value
        elif isinstance(value, tuple):
            offset, meta = value[0], (value[1] if len(value) > 1 else None)
        else:
            offset, meta = value.offset, getattr(value, "metadata", None)
        if offset is None or offset < 0:
            raise ValueError(f"invalid offset {offset!r} for {topic}-{partition}")
        yield topic, int(partition), int(offset), meta
