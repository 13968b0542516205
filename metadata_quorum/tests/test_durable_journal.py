"""The Raft journal is synced before an append, a truncation or a vote returns (pysyncobj's own
FileJournal never syncs): what a follower acknowledges is on its disk."""

import os

from metadata_quorum.quorum import raft


class SyncSpy:
    def __init__(self, monkeypatch):
        self.fsyncs = 0
        real = os.fsync

        def fsync(fd):
            self.fsyncs += 1
            return real(fd)
        monkeypatch.setattr(raft.os, "fsync", fsync)


def test_every_append_and_truncation_is_synced_before_it_returns(tmp_path, monkeypatch):
    spy = SyncSpy(monkeypatch)
    j = raft._create_journal(str(tmp_path / "raft.journal"))
    assert isinstance(j, raft.DurableFileJournal)
    for i in range(1, 4):
        before = spy.fsyncs
        j.add(b"cmd%d" % i, i, 1)
        assert spy.fsyncs == before + 1
    before = spy.fsyncs
    j.deleteEntriesFrom(2)                   # a follower truncating a diverged suffix
    assert spy.fsyncs == before + 1 and len(j) == 2
    for i in range(3, 200):
        j.add(b"x" * 100, i, 2)              # grows the file past its first mapping
    before = spy.fsyncs
    j.deleteEntriesTo(150)                   # compaction keeps entries 151-199: one sync
    assert spy.fsyncs == before + 1 and len(j) == 49
    j._destroy()
    again = raft.DurableFileJournal(str(tmp_path / "raft.journal"))
    assert len(again) == 49 and again[0][1] == 151 and again[-1][1] == 199


def test_term_and_vote_are_synced_before_they_are_acted_on(tmp_path, monkeypatch):
    spy = SyncSpy(monkeypatch)
    j = raft.DurableFileJournal(str(tmp_path / "raft.journal"))
    before = spy.fsyncs
    j.setCurrentTerm(7, "127.0.0.1:1")
    assert spy.fsyncs >= before + 2           # the file, then the directory holding its rename
    j._destroy()
    again = raft.DurableFileJournal(str(tmp_path / "raft.journal"))
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (7, "127.0.0.1:1")
