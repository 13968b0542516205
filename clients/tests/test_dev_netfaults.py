"""`raftka dev isolate|heal` (clients/cli/dev_netfaults.py) against the real nftables of this
machine, without processes: the rules a cluster's table holds, the refusals and their reasons.
The live run (a real `raftka dev --node-addresses`) is in
partition_server/tests/test_live_dev_isolate.py."""

import json

import pytest

from clients.cli.dev import DevLayout
from clients.cli.dev_control import encode, handle
from clients.cli.dev_netfaults import DevNetFaults, table_name
from clients.cli.dev_supervisor import Supervisor
from clients.cli.netfaults import nft
from partition_server.testing import node_address_prefix


@pytest.fixture
def net(tmp_path):
    faults = DevNetFaults(DevLayout(tmp_path, 20000, node_prefix=node_address_prefix()))
    yield faults
    faults.close()
    assert faults.table not in nft.Nft().tables()


def rules(table: str) -> list[str]:
    out = nft.Nft()._run(["-j", "list", "table", "ip", table])
    return [json.dumps(item["rule"]["expr"]) for item in json.loads(out.stdout)["nftables"]
            if "rule" in item]


def test_isolate_cuts_the_node_off_every_other_and_heal_removes_the_table(net):
    prefix = net.layout.node_prefix
    reply = net.command("isolate", "1")                 # a bare id names broker-1
    assert f"broker-1 ({prefix}.22) isolated" in reply and net.table in reply
    assert net.table in nft.Nft().tables() and net.isolated == {"broker-1"}
    text = " ".join(rules(net.table))
    assert text.count(f'"{prefix}.22"') == 2                          # both directions
    for other in (11, 12, 13, 21, 23):
        assert f'"{prefix}.{other}"' in text
    assert '"127.0.0.1"' not in text                                  # clients untouched
    net.command("isolate", "controller-3000")           # a second node: both cut off
    assert len(rules(net.table)) == 4 and net.isolated == {"broker-1", "controller-3000"}
    with pytest.raises(Exception, match="isolated already"):
        net.command("isolate", "broker-1")
    assert "healed: broker-1, controller-3000" in net.command("heal", None)
    assert net.table not in nft.Nft().tables()
    assert net.command("heal", None) == "no node is isolated"


def test_refused_with_the_reason(tmp_path):
    shared = DevNetFaults(DevLayout(tmp_path, 20000))             # every node on 127.0.0.1
    reply = handle(Supervisor([], lambda name: None), "",
                   encode({"op": "isolate", "node": "broker-1"}), net=shared)
    assert reply["ok"] is False and "raftka dev --node-addresses" in reply["error"]
    no_nft = DevNetFaults(DevLayout(tmp_path, 20000, node_prefix="127.0.0"),
                          runner=nft.Nft(binary="nft-not-installed-here"))
    reply = handle(Supervisor([], lambda name: None), "",
                   encode({"op": "isolate", "node": "broker-1"}), net=no_nft)
    assert reply["ok"] is False and "apt-get install -y nftables" in reply["error"]
    net = DevNetFaults(DevLayout(tmp_path, 20000, node_prefix=node_address_prefix()))
    reply = handle(Supervisor([], lambda name: None), "",
                   encode({"op": "isolate", "node": "broker-7"}), net=net)
    assert reply["ok"] is False and "no node 'broker-7'" in reply["error"]
    assert table_name(tmp_path) == table_name(tmp_path) != table_name(tmp_path / "x")


def test_a_table_left_by_a_killed_raftka_dev_is_removed_at_the_next_start(net):
    assert net.clear_leftovers() is None                  # nothing left: nothing said
    net.command("isolate", "broker-0")
    again = DevNetFaults(net.layout)                      # the next `raftka dev`, same data dir
    assert "removed the nftables table" in again.clear_leftovers()
    assert net.table not in nft.Nft().tables()
