"""`raftka transactions list|describe|describe-producers|abort` (like kafka-transactions.sh).

    raftka transactions list [--state Ongoing]             # every coordinator's transactions
    raftka transactions describe --transactional-id app-1  # state, epoch, partitions, timeout
    raftka transactions describe-producers --topic orders --partition 0
    raftka transactions abort --topic orders --partition 0 --start-offset 1234

`abort` is the operator's tool for a hanging transaction (KIP-664): its producer is gone and its
coordinator will not finish it, so the partition's last stable offset is stuck and
read_committed consumers stall. DescribeProducers on the partition leader names the producer
whose open transaction starts at `--start-offset`; WriteTxnMarkers(ABORT) for that producer,
epoch and coordinator epoch closes it on that partition. Exit codes: 0 done, 1 the cluster
refused (unknown id, no such transaction), 2 usage, 3 cluster unreachable.
"""

from __future__ import annotations

import argparse

from clients.admin import AdminClient
from clients.cli.output import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError,
                                add_connection_args, client_config, print_json, print_table, run)
from clients.cluster import COORDINATOR_TRANSACTION
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

PROG = "raftka transactions"
STATES = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "Dead", "PrepareEpochFence"]


def register(sub) -> None:
    p = sub.add_parser("transactions", help="list, describe and abort transactions",
                       description="Inspect transactions and abort a hanging one.")
    ts = p.add_subparsers(dest="transactions_command",
                          metavar="list|describe|describe-producers|abort")
    lst = ts.add_parser("list", help="transactional ids known to every coordinator")
    lst.add_argument("--state", action="append", default=[], choices=STATES,
                     help="only these states (repeatable)")
    add_connection_args(lst)
    d = ts.add_parser("describe", help="one transactional id: state, epoch, partitions")
    d.add_argument("--transactional-id", required=True)
    add_connection_args(d)
    for name, helptext in (("describe-producers", "producers of a partition and their open "
                            "transaction's first offset"),
                           ("abort", "abort the open transaction starting at --start-offset")):
        a = ts.add_parser(name, help=helptext)
        a.add_argument("--topic", required=True)
        a.add_argument("--partition", type=int, required=True)
        if name == "abort":
            a.add_argument("--start-offset", type=int, required=True,
                           help="first offset of the hanging transaction (describe-producers)")
        add_connection_args(a)
    p.set_defaults(func=main, _parser=p)


def main(args: argparse.Namespace) -> int:
    if not args.transactions_command:
        args._parser.print_help()
        return EXIT_USAGE
    return run(f"{PROG} {args.transactions_command}", args, _run, args)


def _refused(code: int, what: str) -> CommandError:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    return CommandError(f"{what}: {name}", EXIT_FAILED)


async def _run(args) -> int:
    async with AdminClient(config=client_config(args)) as admin:
        cluster = admin.cluster
        if not cluster.metadata.brokers:
            await cluster.refresh_metadata(force=True)
        cmd = args.transactions_command
        if cmd == "list":
            return await _list(cluster, args)
        if cmd == "describe":
            return await _describe(cluster, args)
        producers = await _producers(cluster, args.topic, args.partition)
        if cmd == "describe-producers":
            rows = [(s.producer_id, s.producer_epoch, s.last_sequence, s.coordinator_epoch,
                     s.current_txn_start_offset) for s in producers]
            if args.output == "json":
                print_json([dict(zip(PRODUCER_FIELDS, r)) for r in rows])
            else:
                print_table(["PRODUCER_ID", "EPOCH", "LAST_SEQUENCE", "COORDINATOR_EPOCH",
                             "OPEN_TXN_START_OFFSET"], rows)
            return EXIT_OK
        return await _abort(cluster, args, producers)


PRODUCER_FIELDS = ("producer_id", "producer_epoch", "last_sequence", "coordinator_epoch",
                   "current_txn_start_offset")


async def _list(cluster, args) -> int:
    lt = REQUESTS[ApiKey.LIST_TRANSACTIONS]
    found = {}
    for node in sorted(cluster.metadata.brokers):          # each coordinator lists its own ids
        resp = await cluster.call(node, lt(state_filters=list(args.state), producer_id_filters=[],
                                           duration_filter=-1))
        if resp.error_code:
            raise _refused(resp.error_code, f"broker {node}")
        for s in resp.transaction_states:
            found[s.transactional_id] = (s.transactional_id, s.producer_id, s.transaction_state, node)
    rows = sorted(found.values())
    if args.output == "json":
        print_json([dict(zip(("transactional_id", "producer_id", "state", "coordinator"), r))
                    for r in rows])
    else:
        print_table(["TRANSACTIONAL_ID", "PRODUCER_ID", "STATE", "COORDINATOR"], rows)
    return EXIT_OK


async def _describe(cluster, args) -> int:
    tid = args.transactional_id
    node = await cluster.find_coordinator(tid, COORDINATOR_TRANSACTION)
    resp = await cluster.call(node, REQUESTS[ApiKey.DESCRIBE_TRANSACTIONS](transactional_ids=[tid]))
    s = resp.transaction_states[0]
    if s.error_code:
        raise _refused(s.error_code, f"transactional id {tid!r}")
    partitions = [f"{t.topic}-{p}" for t in s.topics for p in t.partitions]
    info = {"transactional_id": tid, "coordinator": node, "state": s.transaction_state,
            "producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
            "timeout_ms": s.transaction_timeout_ms,
            "start_time_ms": s.transaction_start_time_ms, "partitions": partitions}
    if args.output == "json":
        print_json(info)
    else:
        print_table(["FIELD", "VALUE"], [(k, ", ".join(v) if isinstance(v, list) else v)
                                         for k, v in info.items()])
    return EXIT_OK


async def _leader(cluster, topic: str, partition: int) -> int:
    await cluster.refresh_metadata([topic], force=True)
    if cluster.partitions_for(topic) is None:
        raise CommandError(f"unknown topic {topic!r}", EXIT_FAILED)
    leader = cluster.leader_for(topic, partition)
    if leader is None or leader < 0:
        raise CommandError(f"{topic}-{partition}: no such partition or no leader now", EXIT_FAILED)
    return leader


async def _producers(cluster, topic: str, partition: int):
    leader = await _leader(cluster, topic, partition)
    dp = REQUESTS[ApiKey.DESCRIBE_PRODUCERS]
    resp = await cluster.call(leader, dp(topics=[dp.TopicRequest(name=topic,
                                                                 partition_indexes=[partition])]))
    part = resp.topics[0].partitions[0]
    if part.error_code:
        raise _refused(part.error_code, f"{topic}-{partition}")
    return part.active_producers


async def _abort(cluster, args, producers) -> int:
    where = f"{args.topic}-{args.partition}"
    victims = [s for s in producers if s.current_txn_start_offset == args.start_offset]
    if not victims:
        open_at = sorted(s.current_txn_start_offset for s in producers
                         if s.current_txn_start_offset >= 0)
        raise CommandError(f"{where}: no open transaction starts at offset {args.start_offset} "
                           f"(open ones start at {open_at or 'none'})", EXIT_FAILED)
    s = victims[0]
    wm = REQUESTS[ApiKey.WRITE_TXN_MARKERS]
    resp = await cluster.call(await _leader(cluster, args.topic, args.partition), wm(markers=[
        wm.WritableTxnMarker(producer_id=s.producer_id, producer_epoch=s.producer_epoch,
                             transaction_result=False, coordinator_epoch=s.coordinator_epoch,
                             topics=[wm.WritableTxnMarkerTopic(name=args.topic,
                                                               partition_indexes=[args.partition])])]))
    code = resp.markers[0].topics[0].partitions[0].error_code
    if code:
        raise _refused(code, f"abort on {where}")
    result = {"partition": where, "producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
              "aborted_from_offset": args.start_offset}
    if args.output == "json":
        print_json(result)
    else:
        print(f"Aborted the transaction of producer {s.producer_id} (epoch {s.producer_epoch}) "
              f"on {where} starting at offset {args.start_offset}.")
    return EXIT_OK
