"""ListOffsets for consumers and tools: earliest (-2), latest (-1) or by timestamp, grouped into
one request per partition leader, retrying leader moves after a metadata refresh."""

from __future__ import annotations

import contextlib

import trio

from clients.cluster import Cluster
from clients.errors import KafkaTimeoutError, Retry, check, classify
from wire.errors import ErrorCode, KafkaError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

EARLIEST = -2
LATEST = -1
TP = tuple[str, int]


class NoOffsetForPartitionError(KafkaError):
    """auto.offset.reset=none and the partition has no committed offset (or it is out of
    range)."""
    code = ErrorCode.OFFSET_OUT_OF_RANGE


async def list_offsets(cluster: Cluster, specs: dict[TP, int], isolation_level: int = 0,
                       timeout_s: float = 30.0) -> dict[TP, tuple[int, int] | None]:
    """{tp: timestamp spec} -> {tp: (offset, timestamp)}; None for a timestamp past the last
    record (Kafka answers offset -1)."""
    out: dict[TP, tuple[int, int] | None] = {}
    pending = dict(specs)
    deadline = trio.current_time() + timeout_s
    await cluster.refresh_metadata({t for t, _ in pending})
    while pending:
        by_node: dict[int, dict[TP, int]] = {}
        missing = False
        for tp, ts in pending.items():
            leader = cluster.leader_for(*tp)
            if leader is None:
                missing = True
            else:
                by_node.setdefault(leader, {})[tp] = ts
        failed: list[Exception] = []

        async def ask(node: int, part: dict[TP, int]) -> None:
            try:
                for tp, result in (await _ask_node(cluster, node, part, isolation_level)).items():
                    if isinstance(result, int):
                        failed.append(check_error(result, tp))
                    else:
                        out[tp] = result
                        pending.pop(tp, None)
            except KafkaError as exc:        # judged below, outside the nursery
                failed.append(exc)

        async with trio.open_nursery() as nursery:
            for node, part in by_node.items():
                nursery.start_soon(ask, node, part)
        if not pending:
            break
        fatal = [e for e in failed if classify(e) is Retry.NO]
        if fatal:
            raise fatal[0]
        if trio.current_time() > deadline:
            if failed:
                raise failed[0]
            raise KafkaTimeoutError(f"no leader for {sorted(pending)[0]}")
        await trio.sleep(cluster.retry_backoff_s)
        if failed or missing:
            await cluster.refresh_metadata({t for t, _ in pending}, force=True)
            for t in {t for t, _ in pending}:
                if t not in cluster.metadata.topics and t in cluster.metadata.topic_errors:
                    check(cluster.metadata.topic_errors[t], None, f"topic {t!r}")
    return out


@contextlib.asynccontextmanager
async def drop_on_cancel(cluster: Cluster, node: int, channel: str = "default"):
    """A request cancelled after it was sent would leave its answer on the connection, to be
    read as the answer to the next request there: drop the connection instead. (Callers cancel
    polls and commits with timeouts all the time.)"""
    try:
        yield
    except trio.Cancelled:
        with trio.CancelScope(shield=True):
            await cluster.drop_connection(node, channel)
        raise


def check_error(code: int, tp: TP) -> Exception:
    try:
        check(code, None, f"offsets of {tp[0]}-{tp[1]}")
    except Exception as exc:  # noqa: BLE001 - turned into a value for the caller to judge
        return exc
    return RuntimeError("unreachable")


async def _ask_node(cluster: Cluster, node: int, part: dict[TP, int], isolation_level: int):
    lo = REQUESTS[ApiKey.LIST_OFFSETS]
    by_topic: dict[str, list] = {}
    for (t, p), ts in sorted(part.items()):
        by_topic.setdefault(t, []).append(lo.ListOffsetsPartition(
            partition_index=p, current_leader_epoch=-1, timestamp=ts, max_num_offsets=1))
    req = lo(replica_id=-1, isolation_level=isolation_level, timeout_ms=10_000,
             topics=[lo.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
    async with drop_on_cancel(cluster, node):
        resp = await cluster.call(node, req, max_version=7, min_version=1)
    result: dict[TP, tuple[int, int] | None | int] = {}
    for t in resp.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if p.error_code:
                result[tp] = p.error_code
            elif p.offset < 0:
                result[tp] = None
            else:
                result[tp] = (p.offset, p.timestamp)
    return result


__all__ = ["EARLIEST", "LATEST", "NoOffsetForPartitionError", "list_offsets", "ErrorCode"]
