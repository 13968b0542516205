"""Shared fakes for controller tests: a virtual clock and an in-memory committed record log that
replays into a `QuorumController` exactly as the Raft service would (encode → decode → replay)."""

from __future__ import annotations

from metadata_quorum import records as r
from metadata_quorum.controller.quorum_controller import QuorumController


class FakeClock:
    def __init__(self, now_ms: int = 0):
        self.now_ms = now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms


class RecordLog:
    """Committed log + controller. `run(cmd_result)` checks the command changed nothing,
    commits its records and returns the command's response."""

    def __init__(self, controller: QuorumController | None = None, **kw):
        self.controller = controller or QuorumController(**kw)
        self.entries: list[bytes] = []

    @property
    def image(self):
        return self.controller.image

    def commit(self, records) -> None:
        for rec in records:
            data = r.encode_record(rec)
            self.entries.append(data)
            self.controller.replay(len(self.entries) - 1, r.decode_record(data))

    def run(self, command_result):
        records, response = command_result
        self.commit(records)
        return response

    def run_pure(self, command):
        """Call `command()` and assert it left the image untouched before committing."""
        before = self.controller.image
        snapshot = before.to_records()
        records, response = command()
        assert self.controller.image is before and before.to_records() == snapshot, \
            "a controller command changed state before its records were replayed"
        self.commit(records)
        return response

    def replay_all(self) -> QuorumController:
        """A fresh controller rebuilt from the log (what a follower or restart sees)."""
        fresh = QuorumController()
        for offset, data in enumerate(self.entries):
            fresh.replay(offset, r.decode_record(data))
        return fresh
