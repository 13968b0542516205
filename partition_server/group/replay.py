"""What a replay of one `__consumer_offsets` partition found (coordinator_load.py reads it).

Records (msgpack, see group/coordinator.py): `[1, group, topic, partition]` → committed offset
(a null value deletes it), `[2, group]` → a classic group's last settled generation,
`[3, group]` → a KIP-848 group. The last record of each key wins; transactional offset commits
(`[4, …]`, txn/offsets.py) are not committed offsets until their marker, so they are skipped.
The coordinator installs the result in one step once the replay reached the log's end.
"""

from __future__ import annotations

import logging

import msgpack

log = logging.getLogger(__name__)

OFFSET_KEY = 1
GROUP_KEY = 2
CONSUMER_GROUP_KEY = 3          # KIP-848 groups


class LoadedOffsets:
    __slots__ = ("groups", "consumer_groups", "offsets")

    def __init__(self):
        self.groups: dict[str, list | None] = {}            # classic groups' last records
        self.consumer_groups: dict[str, list | None] = {}   # KIP-848 groups'
        self.offsets: dict[str, dict[tuple[str, int], tuple]] = {}   # group → committed

    def apply(self, key: bytes, value: bytes | None) -> None:
        try:
            k = msgpack.unpackb(key)
            if k[0] in (GROUP_KEY, CONSUMER_GROUP_KEY):
                table = self.groups if k[0] == GROUP_KEY else self.consumer_groups
                table[k[1]] = None if value is None else msgpack.unpackb(value)
                return
            if k[0] != OFFSET_KEY:
                return
            _, group, topic, partition = k
            offsets = self.offsets.setdefault(group, {})
            if value is None:
                offsets.pop((topic, partition), None)
            else:
                offsets[(topic, partition)] = tuple(msgpack.unpackb(value))
        except (ValueError, TypeError, IndexError, msgpack.UnpackException):
            log.warning("skipping an unreadable __consumer_offsets record")
