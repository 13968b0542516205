"""A broker's replicas through a reassignment (KIP-455), as the metadata image drives them: the
leader tracks an adding replica but counts it for neither the ISR nor min.insync.replicas until
it joined; an RF-1 partition moving keeps its RF-1 min.insync.replicas cap (the replica list
is target + leaving meanwhile); the removed replica stops and deletes its log."""

import os

from metadata_quorum.image import PartitionState as Registration
from partition_server.log import LogConfig, PartitionLog
from partition_server.replica_manager import ReplicaManager
from partition_server.replication.partition import Role
from wire.records.batch import build_batch

T0 = 1_700_000_000_000


def _manager(tmp_path, broker_id: int) -> ReplicaManager:
    def opener(topic, partition, cfg):
        plog = PartitionLog(str(tmp_path / f"b{broker_id}" / f"{topic}-{partition}"), LogConfig())
        if plog.log_end_offset == 0:
            plog.append_as_leader(build_batch([(None, b"v", [], T0)]), leader_epoch=0, now_ms=T0)
        return plog
    return ReplicaManager(broker_id, opener)


def _apply(rm, reg: Registration, min_isr: int = 2):
    return rm.apply_partition("t", None, 0, list(reg.replicas), list(reg.isr), reg.leader,
                              reg.leader_epoch, reg.partition_epoch, {}, min_isr, T0,
                              reg.replication_factor, reg.adding_replicas)


def test_replication_factor_during_a_move():
    assert Registration(0, (1, 2, 0), (0, 1), 0, 0, 1, (0,), (2,)).replication_factor == 2
    assert Registration(0, (1, 0), (0,), 0, 0, 1, (0,), (1,)).replication_factor == 1
    assert Registration(0, (2, 1, 0), (0,), 0, 0, 1, (0,), (2, 1)).replication_factor == 1
    assert Registration(0, (0, 1), (0, 1), 0, 0, 0).replication_factor == 2


def test_leader_tracks_an_adding_replica_outside_the_isr(tmp_path):
    rm = _manager(tmp_path, 0)
    _apply(rm, Registration(0, (0,), (0,), 0, 0, 0), min_isr=2)
    state = rm.get("t", 0).state
    assert state.min_insync_replicas == 1
    # moving {0} → {1}: replicas (1, 0), adding (1,), removing (0,); RF 1 both sides
    assert _apply(rm, Registration(0, (1, 0), (0,), 0, 0, 1, (0,), (1,))) is Role.LEADER
    assert state.min_insync_replicas == 1 and set(state.followers) == {1}
    assert state.in_sync_count() == 1          # the adding replica does not count yet
    # it fetched up to the log end: proposed for the ISR through AlterPartition
    state.update_follower_fetch(1, rm.get("t", 0).log.log_end_offset, T0)
    change = state.isr_change_needed(T0, 30_000)
    assert change is not None and change.new_isr == (0, 1)


def test_a_replica_removed_and_added_back_between_two_images_starts_afresh(tmp_path):
    """Both changes in one metadata batch: the leader never saw the removal, and the follower's
    old fetch position (its deleted log's end) must not let it join the ISR."""
    rm = _manager(tmp_path, 0)
    _apply(rm, Registration(0, (0, 1), (0,), 0, 0, 0))
    state = rm.get("t", 0).state
    state.update_follower_fetch(1, rm.get("t", 0).log.log_end_offset, T0)
    assert state.followers[1].log_end_offset == 1
    # 1 was removed (its log deleted) and is now being added again
    _apply(rm, Registration(0, (0, 1), (0,), 0, 0, 3, (), (1,)))
    assert state.followers[1].log_end_offset == -1
    assert state.isr_change_needed(T0, 30_000) is None
    state.update_follower_fetch(1, 0, T0)               # its real position: an empty log
    assert state.isr_change_needed(T0, 30_000) is None


def test_removed_replica_stops_and_deletes_its_log_when_the_move_completes(tmp_path):
    rm = _manager(tmp_path, 0)
    _apply(rm, Registration(0, (0, 1), (0, 1), 0, 0, 0))
    directory = rm.get("t", 0).log.directory
    _apply(rm, Registration(0, (1, 2, 0), (0, 1), 0, 0, 1, (0,), (2,)))
    assert rm.get("t", 0) is not None and os.path.isdir(directory)       # still hosting
    assert _apply(rm, Registration(0, (1, 2), (1, 2), 1, 1, 3)) is Role.NONE
    assert rm.get("t", 0) is None and not os.path.exists(directory)


def test_adding_replica_starts_as_a_follower(tmp_path):
    rm = _manager(tmp_path, 2)
    assert _apply(rm, Registration(0, (1, 2, 0), (0, 1), 0, 0, 1, (0,), (2,))) is Role.FOLLOWER
    assert rm.get("t", 0).state.leader_id == 0


# -- stray logs: a replica removed while its broker was down -----------------------------------

def _image(replicas):
    import uuid
    from metadata_quorum import records as r
    from metadata_quorum.image import MetadataImage
    tid = uuid.uuid4()
    return MetadataImage().apply_all(0, [r.TopicRecord("t-x", tid), r.PartitionRecord(
        tid, 0, tuple(replicas), tuple(replicas), replicas[0])])


def test_stray_directories():
    from partition_server.stray_logs import partition_of, stray_directories
    assert partition_of("t-x-0") == ("t-x", 0) and partition_of("t-x") is None
    assert partition_of("-3") is None and partition_of("a-b") is None
    names = ["t-x-0", "gone-1", "t-x-1", "old-2.stray-delete", "hosted-3", "notes"]
    assert stray_directories(names, _image([1, 2]), 0, {("hosted", 3)}) == [
        "t-x-0", "gone-1", "t-x-1", "old-2.stray-delete"]
    assert stray_directories(names, _image([0, 2]), 0, set()) == [
        "gone-1", "t-x-1", "old-2.stray-delete", "hosted-3"]


def test_an_image_without_metadata_finds_nothing_stray():
    # a broker whose image is still the empty one (logs being opened ahead at a restart) must
    # not take its own logs for strays: it would delete them all
    from metadata_quorum.image import MetadataImage
    from partition_server.stray_logs import stray_directories
    assert stray_directories(["t-x-0", "gone-1", "old-2.stray-delete"], MetadataImage(), 0,
                             set()) == []


async def test_delete_stray_logs_leaves_ours_and_lookalikes(tmp_path):
    from partition_server.stray_logs import delete_stray_logs
    for name in ("t-x-0", "gone-1", "controller-3000"):
        (tmp_path / name).mkdir()
    for name in ("t-x-0", "gone-1"):
        (tmp_path / name / ("0" * 20 + ".log")).write_bytes(b"")
    (tmp_path / "controller-3000" / "journal").write_bytes(b"raft")
    (tmp_path / "half-5.stray-delete").mkdir()
    deleted = await delete_stray_logs(str(tmp_path), _image([0, 1]), 0, set())
    assert sorted(deleted) == ["gone-1", "half-5.stray-delete"]
    assert sorted(os.listdir(tmp_path)) == ["controller-3000", "t-x-0"]
