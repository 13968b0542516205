"""A PROPOSED fix for the follower-divergence liveness bug the simulation found, applied only
inside `test_simulation.py::test_with_proposed_fix_every_seed_converges` (monkeypatched, nothing
in partition_server is edited). It exists to show the diagnosis is right: with it every CI seed
converges; without it some seeds leave a follower stuck forever. Delete it once partition_server
carries a fix (the strict xfail in test_simulation.py then starts failing as a reminder).

The three parts, each as Kafka does it:
1. `LeaderEpochCache.end_offset_for(epoch)` for an epoch below the earliest known one answers
   (epoch, start offset of the earliest epoch) — Kafka's LeaderEpochFileCache.endOffsetFor —
   instead of UNDEFINED (-1, -1), which the follower cannot tell from "no divergence".
2. `PartitionLog.truncate_to(offset >= log end)` still drops epoch-cache entries starting at or
   after the log end (Kafka's UnifiedLog.truncateTo: "we may have a conflicting epoch entry at
   the end of the log from the leader ... failed to append any entries before another leader
   was elected").
3. The follower truncates to min(leader's end offset, ITS OWN end offset for the leader's
   diverging epoch) — Kafka's AbstractFetcherThread truncation — not min(leader's end offset,
   log end offset).
"""

import bisect

from partition_server.log import epoch_cache, partition_log
from partition_server.replication import fetcher
from wire.errors import ErrorCode


def end_offset_for(self, epoch, log_end_offset):
    if not self.epochs or epoch < 0:
        return epoch_cache.UNDEFINED
    if epoch < self.epochs[0]:
        return epoch, self.start_offsets[0]
    i = bisect.bisect_right(self.epochs, epoch) - 1
    if i == len(self.epochs) - 1:
        return self.epochs[i], log_end_offset
    return self.epochs[i], self.start_offsets[i + 1]


def install(monkeypatch) -> None:
    original_truncate = partition_log.PartitionLog.truncate_to
    original_apply = fetcher.FetcherManager._apply

    def truncate_to(self, offset):
        if offset >= self.log_end_offset:
            self.epoch_cache.truncate_from_end(self.log_end_offset)
            return
        original_truncate(self, offset)

    def _apply(self, hosted, p, now):
        diverging = p.diverging_epoch
        if p.error_code != ErrorCode.NONE or (diverging.epoch < 0 and diverging.end_offset < 0):
            return original_apply(self, hosted, p, now)
        plog, state = hosted.log, hosted.state
        local_epoch, local_end = plog.end_offset_for(diverging.epoch)
        target = plog.log_start_offset if local_epoch < 0 else min(diverging.end_offset, local_end)
        plog.truncate_to(min(target, plog.log_end_offset))
        state.truncated_to(plog.log_end_offset)
        hosted.producers.truncate_after(plog.log_end_offset)
        return False

    monkeypatch.setattr(epoch_cache.LeaderEpochCache, "end_offset_for", end_offset_for)
    monkeypatch.setattr(partition_log.PartitionLog, "truncate_to", truncate_to)
    monkeypatch.setattr(fetcher.FetcherManager, "_apply", _apply)
