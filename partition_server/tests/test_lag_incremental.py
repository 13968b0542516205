"""The lag monitor measures only what changed (group/lag.py) and leaves the same table and
timestamp cache as the full refresh it replaced (the reference below: every owned group ×
partition on every refresh), over random sequences of commits, high watermark and role changes,
coordinator moves and remote leaders' high watermarks."""

import types

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import partition_server.group.lag as lag_module
from partition_server.group.lag import LagMonitor, compute_lag, timestamp_at
from partition_server.replication.partition import Role
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES
from wire.records.batch import build_batch

DATA = build_batch([(b"k", b"v", [], 1_000 + i) for i in range(20)], base_offset=0)
PARTS = 4


class Reference(LagMonitor):
    """LagMonitor.refresh before it became incremental."""

    async def refresh(self) -> None:
        groups = self.groups
        wanted = {}
        for gid, parts in list(groups.offsets.items()):
            if groups.owns(gid) != ErrorCode.NONE:
                continue
            for (topic, partition), value in parts.items():
                wanted.setdefault((topic, partition), []).append((gid, value[0]))
        table = {}
        now = int(lag_module.time.time() * 1000)
        self._used = {}
        remote = {}
        for (topic, partition), users in wanted.items():
            hosted = self.replicas.get(topic, partition)
            if hosted is not None and hosted.state.role is Role.LEADER and not hosted.offline:
                hw = hosted.state.high_watermark
                for gid, committed in users:
                    ts = None
                    if 0 <= committed < hw:
                        ts = self._cached(topic, partition, committed, lambda: timestamp_at(
                            hosted.log.read(committed, 1, min_one=True).read_bytes(), committed))
                    table[(gid, topic, partition)] = compute_lag(committed, hw, ts, now)
                continue
            p = self._image().partition(topic, partition)
            if p is not None and p.leader >= 0:
                remote.setdefault(p.leader, []).append((topic, partition, users))
        for leader, items in remote.items():
            await self._ask_leader(leader, items, table, now)
        self.table = table
        self._timestamps = self._used


class Log:
    def read(self, offset, max_bytes, min_one=False):
        return types.SimpleNamespace(read_bytes=lambda: DATA)


class World:
    """The coordinator, replica manager, image and remote leader the monitors read."""

    def __init__(self):
        self.offsets, self.loaded, self.remote_hw = {}, {0, 1}, {p: 0 for p in range(PARTS)}
        self.hosted = {("t", p): types.SimpleNamespace(
            state=types.SimpleNamespace(role=Role.LEADER, high_watermark=0), offline=False,
            log=Log()) for p in range(PARTS)}
        self.leader_of_offsets = {0: True, 1: True}
        self.replicas = types.SimpleNamespace(get=self.get, watchers=[], log_dir_failed=False)
        self.groups = types.SimpleNamespace(offsets=self.offsets, owns=self.owns,
                                            loaded=self.loaded)
        offsets_topic = types.SimpleNamespace(partitions={0: None, 1: None})
        self.image = types.SimpleNamespace(topics={"__consumer_offsets": offsets_topic},
                                           partition=self.partition)
        self.peers = types.SimpleNamespace(get=self.conn, drop=None)

    def get(self, topic, partition):
        if topic == "__consumer_offsets":
            return types.SimpleNamespace(state=types.SimpleNamespace(
                role=Role.LEADER if self.leader_of_offsets[partition] else Role.FOLLOWER))
        return self.hosted.get((topic, partition))

    def owns(self, gid):
        pid = int(gid[1:]) % 2
        ok = self.leader_of_offsets[pid] and pid in self.loaded
        return ErrorCode.NONE if ok else ErrorCode.NOT_COORDINATOR

    def partition(self, topic, partition):
        h = self.hosted[(topic, partition)]
        return types.SimpleNamespace(leader=0 if h.state.role is Role.LEADER else 1)

    async def conn(self, leader):
        return types.SimpleNamespace(request=self.answer)

    async def answer(self, req, timeout):
        if req.API_KEY == ApiKey.LIST_OFFSETS:
            lo = RESPONSES[ApiKey.LIST_OFFSETS]
            return lo(topics=[lo.ListOffsetsTopicResponse(name=t.name, partitions=[
                lo.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                offset=self.remote_hw[p.partition_index])
                for p in t.partitions]) for t in req.topics])
        fr = RESPONSES[ApiKey.FETCH]
        return fr(responses=[fr.FetchableTopicResponse(topic=t.topic, partitions=[
            fr.PartitionData(partition_index=p.partition, records=DATA)
            for p in t.partitions]) for t in req.topics])

    def changed(self, p):
        for w in self.replicas.watchers:
            w.add(("t", p))


step = st.one_of(
    st.tuples(st.just("commit"), st.integers(0, 3), st.integers(0, PARTS - 1),
              st.integers(-1, 20)),
    st.tuples(st.just("uncommit"), st.integers(0, 3), st.integers(0, PARTS - 1)),
    st.tuples(st.just("hw"), st.integers(0, PARTS - 1), st.integers(0, 20)),
    st.tuples(st.just("role"), st.integers(0, PARTS - 1)),
    st.tuples(st.just("offsets_leader"), st.integers(0, 1)),
    st.tuples(st.just("load"), st.integers(0, 1)),
    st.tuples(st.just("remote_hw"), st.integers(0, PARTS - 1), st.integers(0, 20)),
    st.tuples(st.just("refresh"), st.integers(0, 5000)))


def play(steps):
    w = World()
    new = LagMonitor(w.groups, w.replicas, lambda: w.image, w.peers, 5)
    ref = Reference(w.groups, w.replicas, lambda: w.image, w.peers, 5)
    clock = types.SimpleNamespace(now=10_000.0)
    real_time = lag_module.time
    lag_module.time = types.SimpleNamespace(time=lambda: clock.now)
    try:
        for op in steps + [("refresh", 1)]:
            kind = op[0]
            if kind == "commit":
                w.offsets.setdefault(f"g{op[1]}", {})[("t", op[2])] = (op[3], None)
                new.touch(f"g{op[1]}")
            elif kind == "uncommit" and ("t", op[2]) in w.offsets.get(f"g{op[1]}", {}):
                del w.offsets[f"g{op[1]}"][("t", op[2])]
                if not w.offsets[f"g{op[1]}"]:
                    del w.offsets[f"g{op[1]}"]
                new.touch(f"g{op[1]}")
            elif kind == "hw":
                w.hosted[("t", op[1])].state.high_watermark = op[2]
                w.changed(op[1])
            elif kind == "role":
                s = w.hosted[("t", op[1])].state
                s.role = Role.FOLLOWER if s.role is Role.LEADER else Role.LEADER
                w.changed(op[1])
            elif kind == "offsets_leader":
                w.leader_of_offsets[op[1]] = not w.leader_of_offsets[op[1]]
            elif kind == "load":
                w.loaded ^= {op[1]}
            elif kind == "remote_hw":
                w.remote_hw[op[1]] = op[2]
            elif kind == "refresh":
                clock.now += op[1] / 1000
                trio.run(ref.refresh)
                trio.run(new.refresh)
                assert new.table == ref.table
                assert new._timestamps == ref._timestamps
    finally:
        lag_module.time = real_time
    return new


@settings(max_examples=250, deadline=None)
@given(st.lists(step, max_size=40))
def test_random_sequences_leave_the_table_of_the_full_refresh(steps):
    play(steps)


def test_an_idle_refresh_measures_nothing_here():
    w = World()
    mon = LagMonitor(w.groups, w.replicas, lambda: w.image, w.peers, 5)
    for p in range(PARTS):
        w.hosted[("t", p)].state.high_watermark = 5
        w.offsets.setdefault("g0", {})[("t", p)] = (5, None)   # caught up
    mon.touch("g0")
    trio.run(mon.refresh)
    assert len(mon.table) == PARTS and mon._to_measure() == set()
    w.hosted[("t", 2)].state.high_watermark = 7              # one partition moves
    w.changed(2)
    assert mon._to_measure() == {("t", 2)}


def test_partitions_led_elsewhere_are_asked_in_turn_at_most_the_bound_per_refresh():
    w = World()
    asked = []
    answer = w.answer

    async def counting(req, timeout):
        if req.API_KEY == ApiKey.LIST_OFFSETS:
            asked.append(sorted(p.partition_index for t in req.topics for p in t.partitions))
        return await answer(req, timeout)
    w.peers = types.SimpleNamespace(get=lambda leader: _conn(counting), drop=None)
    for p in range(PARTS):
        w.hosted[("t", p)].state.role = Role.FOLLOWER      # all led by broker 1
        w.offsets.setdefault("g0", {})[("t", p)] = (0, None)
    mon = LagMonitor(w.groups, w.replicas, lambda: w.image, w.peers, 5, remote_per_refresh=1)
    ref = Reference(w.groups, w.replicas, lambda: w.image, w.peers, 5)
    mon.touch("g0")
    trio.run(mon.refresh)
    assert asked == [[0, 1, 2, 3]]                  # new: every one asked at once
    assert {k: v.high_watermark for k, v in mon.table.items()} == {
        ("g0", "t", p): 0 for p in range(PARTS)}
    for p in range(PARTS):
        w.remote_hw[p] = 10 + p
    asked.clear()
    for _ in range(PARTS):
        trio.run(mon.refresh)
    assert sorted(asked) == [[0], [1], [2], [3]]    # one a refresh, each once per round
    trio.run(ref.refresh)
    def rows(table):             # lag in seconds moves with the clock between the two refreshes
        return {k: (v.committed, v.high_watermark, v.messages) for k, v in table.items()}
    assert rows(mon.table) == rows(ref.table) and mon.table.keys() == ref.table.keys()
    # a group committing on a partition: asked for at once, besides the one in turn
    w.offsets["g1"] = {("t", 2): (5, None)}
    mon.touch("g1")
    asked.clear()
    trio.run(mon.refresh)
    assert len(asked) == 1 and 2 in asked[0] and len(asked[0]) == 2
    assert mon.table[("g1", "t", 2)].committed == 5


def _conn(request):
    async def get():
        return types.SimpleNamespace(request=request)
    return get()
