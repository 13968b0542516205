"""Read each controller's metadata state straight from its listener and compare them.

    images = controller_images(cluster)          # {controller id: MetadataImage}, same end offset
    assert_same_images(images)                    # AssertionError naming the first difference

`controller_images` sends FetchSnapshot (API 59, v1) to every live controller's own listener
(never through a broker): the answer is that controller's current image as records
(`MetadataImage.to_records()`) and the metadata end offset it stands for. It asks again until
every controller answers with the same end offset (a record committed between two answers would
make a true difference and a stale one look alike), so call it once metadata is quiet: heartbeats
are soft state and commit nothing, but fencing, ISR changes and admin requests do.

`log_image` rebuilds a controller's image by replaying its `__cluster_metadata` stream from
offset 0 with Fetch (as a broker does), when the controller still serves it from 0 (after a Raft
snapshot it starts later and the function returns None): a check that the log and the image agree.

`cluster` is a `partition_server.testing.LiveCluster` (or any subclass): its `layout` gives the
controllers' ports and `proc("controller-<id>")` tells whether a controller is running.
"""

from __future__ import annotations

import time

import trio

from clients.cli.dev import CONTROLLER_IDS
from clients.connection import BrokerConnection, ConnectionClosed
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import decode_record
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import decode_batch, iter_batches

METADATA_TOPIC = "__cluster_metadata"
# a replica id no broker has: DescribeQuorum would list it as an observer, nothing else
READER_ID = -2


def _records(data) -> list[tuple[int, object]]:
    out = []
    for h in iter_batches(bytes(data or b"")):
        for rec in decode_batch(h.bytes()).records:
            out.append((rec.offset, decode_record(rec.value)))
    return out


async def _snapshot(host: str, port: int, timeout_s: float) -> tuple[int, list]:
    conn = BrokerConnection(host, port, client_id="chaos-metadata-images")
    try:
        await conn.connect(timeout_s=timeout_s)
        cls = REQUESTS[ApiKey.FETCH_SNAPSHOT]
        req = cls(replica_id=READER_ID, max_bytes=1 << 30, topics=[cls.TopicSnapshot(
            name=METADATA_TOPIC, partitions=[cls.PartitionSnapshot(partition=0)])])
        resp = await conn.request(req, 1, timeout_s=timeout_s)
    finally:
        await conn.aclose()
    part = resp.topics[0].partitions[0]
    if part.error_code:
        raise RuntimeError(f"FetchSnapshot from {host}:{port}: {ErrorCode(part.error_code).name}")
    return part.snapshot_id.end_offset, [rec for _, rec in _records(part.unaligned_records)]


def read_snapshot(host: str, port: int, timeout_s: float = 30) -> tuple[int, list]:
    """(end offset, records) of one controller's current image, by FetchSnapshot v1."""
    return trio.run(_snapshot, host, port, timeout_s)


async def _log(host: str, port: int, timeout_s: float) -> MetadataImage | None:
    conn = BrokerConnection(host, port, client_id="chaos-metadata-log")
    image = MetadataImage()
    cls = REQUESTS[ApiKey.FETCH]
    try:
        await conn.connect(timeout_s=timeout_s)
        with trio.fail_after(timeout_s):
            while True:
                req = cls(replica_id=READER_ID, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20,
                          topics=[cls.FetchTopic(topic=METADATA_TOPIC, partitions=[
                              cls.FetchPartition(partition=0, fetch_offset=image.offset + 1,
                                                 partition_max_bytes=64 << 20)])])
                part = (await conn.request(req, 12, timeout_s=timeout_s)).responses[0].partitions[0]
                if part.error_code:
                    raise RuntimeError(f"Fetch from {host}:{port}: "
                                       f"{ErrorCode(part.error_code).name}")
                if image.offset < 0 and part.log_start_offset > 0:
                    return None                     # the stream no longer starts at 0
                records = _records(part.records)
                if not records:
                    if image.offset + 1 >= part.high_watermark:
                        return image
                    raise RuntimeError(f"Fetch from {host}:{port} at {image.offset + 1} returned "
                                       f"nothing below the high watermark {part.high_watermark}")
                for offset, rec in records:
                    if offset == image.offset + 1:
                        image = image.apply(offset, rec)
    finally:
        await conn.aclose()


def log_image(host: str, port: int, timeout_s: float = 60) -> MetadataImage | None:
    """A controller's image rebuilt from its metadata stream replayed from offset 0 (None when
    the controller serves the stream from a later offset only)."""
    return trio.run(_log, host, port, timeout_s)


def controller_addresses(cluster) -> dict[int, tuple[str, int]]:
    return {cid: (cluster.layout.controller_host(i), cluster.layout.controller_port(i))
            for i, cid in enumerate(CONTROLLER_IDS)}


def _running(cluster, cid: int) -> bool:
    try:
        return cluster.proc(f"controller-{cid}").proc.poll() is None
    except StopIteration:
        return False


def controller_images(cluster, timeout_s: float = 60,
                      controllers: list[int] | None = None) -> dict[int, MetadataImage]:
    """{controller id: MetadataImage} of every running controller (or of `controllers`), read by
    FetchSnapshot at a moment when all of them report the same metadata end offset. Raises
    AssertionError when they do not agree on an end offset within `timeout_s`."""
    addresses = controller_addresses(cluster)
    wanted = controllers if controllers is not None else \
        [cid for cid in addresses if _running(cluster, cid)]
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        snaps, problems = {}, {}
        for cid in wanted:
            try:
                snaps[cid] = read_snapshot(*addresses[cid], timeout_s=min(30, timeout_s))
            except (ConnectionClosed, OSError, DecodeError, trio.TooSlowError, RuntimeError,
                    IndexError) as exc:
                problems[cid] = f"{type(exc).__name__}: {exc}"
        ends = {cid: end for cid, (end, _) in snaps.items()}
        if not problems and len(set(ends.values())) == 1:
            return {cid: MetadataImage.from_records(records, end - 1)
                    for cid, (end, records) in snaps.items()}
        last = {"end offsets": ends, "errors": problems}
        if time.monotonic() > deadline:
            raise AssertionError(f"controllers did not report one metadata end offset within "
                                 f"{timeout_s}s: {last}")
        time.sleep(0.2)


def describe_difference(a: MetadataImage, b: MetadataImage, limit: int = 5) -> str:
    ra, rb = a.to_records(), b.to_records()
    only_a = [r for r in ra if r not in rb]
    only_b = [r for r in rb if r not in ra]
    if not only_a and not only_b:
        return f"same records, different order ({len(ra)} records)"
    return (f"{len(ra)} vs {len(rb)} records; only in the first ({len(only_a)}): "
            f"{only_a[:limit]}; only in the second ({len(only_b)}): {only_b[:limit]}")


def assert_same_images(images: dict[int, MetadataImage]) -> None:
    """Every image equals the first (by `MetadataImage.same_state`); the message names the
    controllers and the first differing records."""
    items = sorted(images.items())
    if not items:
        raise AssertionError("no controller image to compare")
    first_id, first = items[0]
    for cid, image in items[1:]:
        if not first.same_state(image):
            raise AssertionError(f"controller {first_id} and controller {cid} hold different "
                                 f"metadata at offset {first.offset}: "
                                 f"{describe_difference(first, image)}")
