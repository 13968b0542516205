"""`raftka dev --node-addresses` + `raftka dev isolate NODE` / `heal` (issue 21 item 1, issue 20
item 1): real `raftka dev` and `raftka dev ACTION` processes, nftables on this machine (root).
The active controller isolated: another is elected and topics can still be created; healed,
it follows the new leader; a node left isolated is healed when `raftka dev` stops."""

import signal

import pytest
import trio
from confluent_kafka.admin import AdminClient, NewTopic

from clients.cli.dev_netfaults import table_name
from clients.cli.netfaults import nft
from clients.cli.quorum import describe
from partition_server.testing import free_base_port, node_address_prefix
from partition_server.tests.test_live_dev_supervise import (ctl, next_line, node, start_dev,
                                                            wait_status)

pytestmark = pytest.mark.live


def test_isolate_the_active_controller_then_heal(tmp_path):
    nft.Nft().check()
    prefix, base = node_address_prefix(), free_base_port()
    table = table_name(tmp_path.resolve())
    proc, lines = start_dev(tmp_path, base, "--node-addresses", prefix)
    try:
        line, _ = next_line(lines, "bootstrap.servers=", 90)
        bootstrap = line.split("=", 1)[1]
        assert bootstrap == ",".join(f"{prefix}.{21 + b}:{base + b}" for b in range(3))
        leader = wait_status(tmp_path, lambda v: v["quorum_leader"] in (3000, 3001, 3002)
                             )["quorum_leader"]
        code, out, err = ctl(tmp_path, "isolate", f"controller-{leader}")
        assert code == 0 and f"controller-{leader} ({prefix}.{11 + leader - 3000}) isolated" \
            in out, err
        view = wait_status(tmp_path, lambda v: v["quorum_leader"] not in (None, -1, leader),
                           timeout=90)
        assert node(view, f"controller-{leader}")["state"] == "running, isolated"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for fut in admin.create_topics([NewTopic("while-isolated", 1, 3)]).values():
            fut.result(60)
        assert nft.Nft().dropped(table) > 0
        code, out, err = ctl(tmp_path, "heal")
        assert code == 0 and f"healed: controller-{leader}" in out, err
        assert table not in nft.Nft().tables()

        def rejoined(v):
            # the healed controller follows whoever leads now: not necessarily the leader
            # elected while it was cut off, since its return with a higher term (pysyncobj has
            # no pre-vote) may start another election
            current = v["quorum_leader"]
            return current not in (None, -1) and trio.run(
                describe, f"{prefix}.{11 + leader - 3000}",
                base + 1000 + leader - 3000)["leader_id"] == current
        deadline_view = wait_status(tmp_path, rejoined, timeout=90)
        assert all(n["state"] == "running" for n in deadline_view["nodes"])
        assert ctl(tmp_path, "isolate", "broker-2")[0] == 0      # left isolated at the stop
        assert table in nft.Nft().tables()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(90)
        left_behind = table in nft.Nft().tables()
        nft.Nft().remove(table)             # never leave rules on the machine, even on failure
    assert code == 0
    assert not left_behind, "`raftka dev` stopped with a node still isolated by its table"
