"""A broker's log directories (`log.dirs`, JBOD), as Kafka's LogManager keeps them (KIP-858).

Each directory holds partition logs `<topic>-<partition>` and a `meta.properties` naming the
node and the directory's id (a UUID, written on first use, kept for the directory's life): the
id is what BrokerRegistration (LogDirs) and BrokerHeartbeat (OfflineLogDirs) carry.

States of a directory:

    ONLINE ──I/O error on any of its files (ReplicaManager.storage_failed)──▶ OFFLINE
    (unreadable at start) ─────────────────────────────────────────────────▶ OFFLINE

OFFLINE lasts until the broker restarts (Kafka's rule: a failed disk is replaced, then the broker
restarted). Only that directory's replicas go offline; when every directory is offline the broker
shuts down (broker.py).

Placement (Kafka's LogManager.nextLogDirs): a partition found at start stays in the directory
holding it; a new one goes to the online directory with the fewest partitions (current and future
logs), ties to the first listed. A partition found in two directories at start is Kafka's fatal
error, with Kafka's words. A partition not found while some directory was offline at start is
placed in that offline directory as an offline replica (Kafka will not recreate a replica that
may live on a failed disk: a replica recreated empty could be elected and lose what it held).

Moves between directories (AlterReplicaLogDirs) live in log_dir_moves.py; a future log is
`<topic>-<partition>.<hex id>-future`, and a current log being swapped out is renamed
`<topic>-<partition>.<hex id>-delete` first. At start a `-delete` directory is removed and a
future log is promoted when no current log exists (a crash between the two renames of a swap),
else discarded (the move is not resumed: it can be asked again).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import threading
import uuid

from partition_server.log.fsync import fsync_dir

log = logging.getLogger(__name__)

META_FILE = "meta.properties"
FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"
_LOG_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_MOVE_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.[0-9a-f]{32}(?P<kind>-future|-delete)$")

TopicPartition = tuple[str, int]
# Kafka's reserved directory id (DirectoryId.LOST) for a directory whose own id is unknown: one
# that could not be read at start is reported offline under it
LOST_DIRECTORY_ID = uuid.UUID(int=1)
OF_LOG_MEMORY = 200_000          # partition paths remembered by LogDirs.of_log


class LogDirError(Exception):
    """A configuration the broker cannot start with (the message is Kafka's)."""


@dataclasses.dataclass(eq=False)
class LogDir:
    path: str
    dir_id: uuid.UUID | None = None
    online: bool = True
    error: str | None = None
    logs: int = 0               # current and future logs placed here (kept by LogDirs)


def read_meta(path: str) -> dict[str, str]:
    props = {}
    with open(os.path.join(path, META_FILE)) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                props[k.strip()] = v.strip()
    return props


def _ensure_meta(d: LogDir, node_id: int) -> None:
    """Read the directory's id, or give it one (Kafka's meta.properties, version 1)."""
    os.makedirs(d.path, exist_ok=True)
    try:
        props = read_meta(d.path)
    except FileNotFoundError:
        props = {}
    if "node.id" in props and int(props["node.id"]) != node_id:
        raise LogDirError(f"Stored node id {props['node.id']} doesn't match previous node id "
                          f"{node_id} in {os.path.join(d.path, META_FILE)}")
    if "directory.id" in props:
        d.dir_id = uuid.UUID(props["directory.id"])
        return
    d.dir_id = uuid.uuid4()
    tmp = os.path.join(d.path, META_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"#\nversion=1\nnode.id={node_id}\ndirectory.id={d.dir_id}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(d.path, META_FILE))
    fsync_dir(d.path)


class LogDirs:
    def __init__(self, paths: list[str], node_id: int):
        self.dirs = [LogDir(os.path.abspath(p)) for p in paths]
        if len({d.path for d in self.dirs}) != len(self.dirs):
            raise LogDirError(f"Duplicate log directory found: {','.join(paths)}")
        for d in self.dirs:
            try:
                _ensure_meta(d, node_id)
            except OSError as exc:
                log.error("log directory %s is offline at start: %s", d.path, exc)
                d.online, d.error = False, str(exc)
                d.dir_id = d.dir_id or LOST_DIRECTORY_ID
        self.offline_at_start = [d for d in self.dirs if not d.online]
        self.placement: dict[TopicPartition, LogDir] = {}      # current logs
        self.futures: dict[TopicPartition, LogDir] = {}        # future logs (moves)
        self.preferred: dict[TopicPartition, LogDir] = {}      # AlterReplicaLogDirs before hosting
        # future logs of moves a stop interrupted: the mover resumes them (log_dir_moves.py)
        self.resumable: dict[TopicPartition, tuple[LogDir, str]] = {}
        self.on_all_failed = None           # the broker shuts down (Kafka's rule)
        self.changes = 0                    # placements made: offline_replicas re-checks on change
        self._lock = threading.Lock()       # `place` runs in the log-open threads too
        self._of_log: dict[str, LogDir | None] = {}
        self._scan()

    # -- lookups ----------------------------------------------------------------------------------

    @property
    def first(self) -> LogDir:
        return self.dirs[0]

    def by_path(self, path: str) -> LogDir | None:
        path = os.path.abspath(path)
        return next((d for d in self.dirs if d.path == path), None)

    def of_log(self, directory: str) -> LogDir | None:
        """The log directory holding a partition log's `directory`. Remembered per path (two
        `abspath` calls were most of it, once per hosted replica in walks over all of them;
        a path always lies in the same directory), forgotten wholesale past OF_LOG_MEMORY."""
        d = self._of_log.get(directory)
        if d is None:
            d = self.by_path(os.path.dirname(os.path.abspath(directory)))
            if len(self._of_log) >= OF_LOG_MEMORY:
                self._of_log.clear()        # deleted partitions' paths do not pile up
            self._of_log[directory] = d
        return d

    def online(self) -> list[LogDir]:
        return [d for d in self.dirs if d.online]

    def offline_ids(self) -> list[uuid.UUID]:
        return [d.dir_id for d in self.dirs if not d.online and d.dir_id is not None]

    def count(self, d: LogDir) -> int:
        return d.logs

    # -- bookkeeping (each log directory counts its logs: placing 10,000 partitions stays linear)

    @staticmethod
    def _put(table: dict, key: TopicPartition, d: LogDir) -> None:
        old = table.get(key)
        if old is not None:
            old.logs -= 1
        table[key] = d
        d.logs += 1

    @staticmethod
    def _drop(table: dict, key: TopicPartition) -> None:
        old = table.pop(key, None)
        if old is not None:
            old.logs -= 1

    def set_placement(self, key: TopicPartition, d: LogDir) -> None:
        with self._lock:
            self._put(self.placement, key, d)
            self.changes += 1

    def set_future(self, key: TopicPartition, d: LogDir) -> None:
        with self._lock:
            self._put(self.futures, key, d)

    def drop_future(self, key: TopicPartition) -> None:
        with self._lock:
            self._drop(self.futures, key)

    # -- start ------------------------------------------------------------------------------------

    def _scan(self) -> None:
        """Find every log in the online directories; clean up interrupted moves."""
        futures: dict[TopicPartition, tuple[LogDir, str]] = {}
        for d in self.online():
            for name in sorted(os.listdir(d.path)):
                full = os.path.join(d.path, name)
                if not os.path.isdir(full):
                    continue
                m = _LOG_NAME.match(name)
                if m is not None:
                    key = (m["topic"], int(m["partition"]))
                    other = self.placement.get(key)
                    if other is not None:
                        raise LogDirError(
                            f"Duplicate log directories for {key[0]}-{key[1]} are found in both "
                            f"{os.path.join(other.path, name)} and {full}. It is likely because "
                            "log directory failure happened while broker was replacing current "
                            "replica with future replica. Recover broker from this failure by "
                            "manually deleting one of the two directories for this partition. "
                            "It is recommended to delete the partition in the log directory "
                            "that is known to have failed recently.")
                    self._put(self.placement, key, d)
                    continue
                m = _MOVE_NAME.match(name)
                if m is None:
                    continue
                key = (m["topic"], int(m["partition"]))
                if m["kind"] == DELETE_SUFFIX:
                    log.info("removing %s (a replica moved away before the last stop)", full)
                    shutil.rmtree(full, ignore_errors=True)
                else:
                    futures[key] = (d, full)
        for key, (d, full) in futures.items():
            if key in self.placement or self.offline_at_start:
                # the move did not finish (or the current log may sit in the directory that
                # is offline now): keep copying once the partition is hosted, as Kafka does
                log.info("future log %s: its move resumes", full)
                self.resumable[key] = (d, full)
                self._put(self.futures, key, d)
            else:           # the swap renamed the current log away, then stopped: finish it
                target = os.path.join(d.path, f"{key[0]}-{key[1]}")
                log.info("promoting future log %s to %s (an interrupted swap)", full, target)
                os.rename(full, target)
                fsync_dir(d.path)
                self._put(self.placement, key, d)

    # -- placement --------------------------------------------------------------------------------

    def place(self, topic: str, partition: int) -> LogDir:
        """The directory of a partition's current log: where it is, else where it goes."""
        key = (topic, partition)
        with self._lock:
            d = self.placement.get(key)
            if d is not None:
                return d
            if self.offline_at_start:
                d = self.offline_at_start[0]    # it may live there: never recreate it empty
            else:
                wanted = self.preferred.pop(key, None)
                d = wanted if wanted is not None and wanted.online else self.least_loaded()
            self._put(self.placement, key, d)
            return d

    def least_loaded(self, exclude: LogDir | None = None) -> LogDir:
        """Kafka's choice for a new log: the online directory with the fewest logs."""
        candidates = [d for d in self.online() if d is not exclude]
        if not candidates:
            raise OSError("every log directory is offline")
        return min(candidates, key=lambda d: d.logs)

    def forget(self, topic: str, partition: int) -> None:
        """The partition is no longer hosted (deleted or moved off this broker)."""
        with self._lock:
            self._drop(self.placement, (topic, partition))
            self._drop(self.futures, (topic, partition))

    # -- failure ----------------------------------------------------------------------------------

    def fail(self, d: LogDir, exc: BaseException) -> bool:
        """Mark `d` offline; True when it was online until now."""
        if not d.online:
            return False
        d.online, d.error = False, str(exc)
        log.error("log directory %s failed (%s): its replicas go offline", d.path, exc)
        if not self.online() and self.on_all_failed is not None:
            log.error("shutting down: every log directory (%s) has failed",
                      ", ".join(x.path for x in self.dirs))
            self.on_all_failed()
        return True
