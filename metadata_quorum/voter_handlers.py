"""AddRaftVoter (80) and RemoveRaftVoter (81): controllers join and leave a running quorum.

The decisions are metadata_quorum/controller/voter_control.py's; this module runs them:

1. under the service lock: validate against the committed voter set, commit the PENDING
   VotersRecord;
2. propose pysyncobj's membership entry (add/remove the voter's Raft address), wait for it;
3. under the lock: `resolve` — the new set if the leader's membership shows the change, else the
   old one — committed as the change's end. The answer is sent after that commit.

A change left PENDING (the active controller died, lost quorum, or step 3's commit failed) is
resolved the same way by the active controller's tick or a newly active controller
(`resolve_pending`), so a second change is refused only while one is genuinely in flight.

Errors (Kafka's): NOT_CONTROLLER (41) not the active controller, or it was the voter being
removed (leadership is handed to another voter first: pysyncobj cannot remove its own leader);
REQUEST_TIMED_OUT (7) another change in flight, the new voter's CONTROLLER listener does not
accept connections, or the change did not take effect in time;
DUPLICATE_VOTER (126); VOTER_NOT_FOUND (127); INVALID_REQUEST (42) bad endpoints, removing the
last voter, or a change that would leave no reachable majority.

The new voter's listeners carry its CONTROLLER listener (where brokers and tools reach it) and
its RAFT listener (its pysyncobj address, `raftka.controller.raft.peers`).
"""

from __future__ import annotations

import logging

import trio

from common.connection import open_tcp_stream
from metadata_quorum.controller import voter_control
from metadata_quorum.image import Voter
from metadata_quorum.quorum.raft import fail_reason
from metadata_quorum.records import NoOpRecord
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES

log = logging.getLogger(__name__)

MEMBERSHIP_TIMEOUT_S = 10.0
LEAVING_WAIT_S = 5.0
REACH_TIMEOUT_S = 3.0
REACH_SETTLE_S = 3.0


def _answer(api_key: int, error: int = 0, message: str | None = None):
    return RESPONSES[api_key](error_code=error, error_message=message)


async def handle_add_raft_voter(svc, req):
    b = req.body
    endpoints = {x.name.upper(): (x.host, x.port) for x in b.listeners}
    host, port = endpoints.get("CONTROLLER", ("", 0))
    rhost, rport = endpoints.get("RAFT", ("", 0))
    voter = Voter(b.voter_id, f"{rhost}:{rport}" if rhost else "", host, port)
    if svc.active and host and port > 0 and not await _listening(host, port):
        # as Kafka, which asks the new voter for its ApiVersions first: a voter that is not
        # running would count toward the majority at once and leave one failure less to spare
        return _answer(ApiKey.ADD_RAFT_VOTER, ErrorCode.REQUEST_TIMED_OUT,
                       f"controller {b.voter_id} does not answer at {host}:{port}: start it "
                       "(knowing the current voters) before adding it")
    return await _run(svc, ApiKey.ADD_RAFT_VOTER, lambda voters, change, reachable:
                      voter_control.plan_add(voters, change, voter, reachable))


async def handle_remove_raft_voter(svc, req):
    from metadata_quorum.service import NotActive
    node_id = req.body.voter_id
    if svc.active and node_id == svc.config.node_id:
        # pysyncobj refuses to remove its own leader: hand leadership over, the caller retries
        # (unless the removal would be refused anyway: the last voter, no majority left)
        try:
            await _plan(svc, lambda voters, change, reachable:
                        voter_control.plan_remove(voters, change, node_id, reachable))
        except voter_control.VoterRefused as exc:
            return _answer(ApiKey.REMOVE_RAFT_VOTER, exc.error, exc.message)
        except NotActive as exc:
            return _answer(ApiKey.REMOVE_RAFT_VOTER, ErrorCode.NOT_CONTROLLER, str(exc))
        svc.quorum.transfer_leadership()
        return _answer(ApiKey.REMOVE_RAFT_VOTER, ErrorCode.NOT_CONTROLLER,
                       f"controller {node_id} is the active controller: leadership is being "
                       "handed to another voter, retry there")
    return await _run(svc, ApiKey.REMOVE_RAFT_VOTER, lambda voters, change, reachable:
                      voter_control.plan_remove(voters, change, node_id, reachable))


async def _listening(host: str, port: int) -> bool:
    with trio.move_on_after(REACH_TIMEOUT_S):
        try:
            stream = await open_tcp_stream(host, port)
        except OSError:
            return False
        await stream.aclose()
        return True
    return False


async def _run(svc, api_key: int, planner):
    from metadata_quorum.service import NotActive
    owner = False
    try:
        plan = await _plan(svc, planner)
        async with svc.lock:
            if not svc.active:
                raise NotActive("not the active controller")
            await svc._abort_open_transaction()
            plan = planner(svc.current_voters(), svc.controller.image.voter_change,
                           svc.reachable_voters())
            # from here the tick must not resolve the change: it is ours until step 3
            svc.voter_change_busy = owner = True
            await svc.commit([plan.pending])
            if plan.kind == "remove":
                await svc.commit([NoOpRecord()])
        pause_ms = getattr(svc.config, "voter_change_pause_ms", 0)
        if pause_ms:                                    # a test's window to fail us in
            await trio.sleep(pause_ms / 1000)
        if plan.kind == "remove":
            await _until_leaving_voter_knows(svc, plan.voter)
        reason = await _change_membership(svc, plan)
        took_effect = await resolve_pending(svc)
    except voter_control.VoterRefused as exc:
        return _answer(api_key, exc.error, exc.message)
    except NotActive as exc:
        return _answer(api_key, ErrorCode.NOT_CONTROLLER, str(exc))
    finally:
        if owner:           # a refused request must not clear the flag of the one in flight
            svc.voter_change_busy = False
    if not took_effect:
        return _answer(api_key, ErrorCode.REQUEST_TIMED_OUT,
                       f"the Raft membership change did not take effect ({reason}); "
                       "the voter set is unchanged")
    log.info("controller %s %s the quorum", plan.voter.node_id,
             "joined" if plan.kind == "add" else "left")
    return _answer(api_key)


async def _until_leaving_voter_knows(svc, voter: Voter) -> None:
    """The voter being removed must apply the PENDING record (so it stops serving brokers)
    before pysyncobj drops it: the leader drops a removed node's connection as soon as the
    membership entry is appended, before that node could learn the record is committed. The
    NoOp committed after the record travels in an AppendEntries carrying a commit index past
    it: once the voter's match index reaches the commit index, it has the record committed.
    An unreachable voter (the replace-a-dead-controller case) is not waited for."""
    target = svc.quorum.status()["commit_index"]
    with trio.move_on_after(LEAVING_WAIT_S):
        while svc.quorum.members().get(voter.raft_address):
            if svc.quorum.status()["match_index"].get(voter.node_id, -1) >= target:
                return
            await trio.sleep(0.05)
    if svc.quorum.members().get(voter.raft_address):
        log.warning("controller %d did not confirm it is leaving; removing it anyway",
                    voter.node_id)


async def _plan(svc, planner):
    """The planner's verdict, looked at again for up to REACH_SETTLE_S while it is refused for
    want of reachable voters: pysyncobj only notices a quiet link is stale when it next sends,
    so a newly elected leader sees followers as unreachable until it has reconnected (~0.5 s).
    Outside the lock: heartbeats and other commands go on meanwhile."""
    from metadata_quorum.service import NotActive
    deadline = trio.current_time() + REACH_SETTLE_S
    while True:
        if not svc.active:      # only the active controller's view of the voters counts
            raise NotActive("not the active controller")
        try:
            return planner(svc.current_voters(), svc.controller.image.voter_change,
                           svc.reachable_voters())
        except voter_control.VoterRefused as exc:
            if not exc.unreachable or trio.current_time() > deadline:
                raise
        await trio.sleep(0.25)


async def _change_membership(svc, plan) -> str:
    """Propose pysyncobj's membership entry and wait for its outcome (a reason for the log)."""
    done = trio.Event()
    outcome: list = []

    def finish(res, err):
        outcome.append(err)
        done.set()

    def callback(res, err):
        try:
            svc.token.run_sync_soon(finish, res, err)
        except trio.RunFinishedError:
            pass

    svc.quorum.change_membership(plan.kind, plan.voter.raft_address, callback)
    with trio.move_on_after(MEMBERSHIP_TIMEOUT_S):
        await done.wait()
    if not outcome:
        return "no answer from Raft in time"
    return "committed" if outcome[0] == 0 else fail_reason(outcome[0])


async def resolve_pending(svc) -> bool:
    """End the change recorded as in flight (see module doc); True if it took effect."""
    from metadata_quorum.service import NotActive
    async with svc.lock:
        if not svc.active:
            raise NotActive("not the active controller")
        image = svc.controller.image
        plan = voter_control.pending_plan(svc.current_voters(), image.voter_change)
        if plan is None:
            return False
        record, took_effect = voter_control.resolve(plan, set(svc.quorum.members()))
        await svc.commit([record])
        log.info("voter change %s: %s", image.voter_change, "done" if took_effect else "aborted")
        return took_effect
