"""The pure halves of the kernel network faults (nftables rulesets, tc command lists) and the
clear refusals; the live tests in chaos_tests/live/tests/test_live_netfaults.py run them."""

import pytest

from clients.cli.netfaults import nft
from clients.cli.netfaults.tc import Shape, Tc, commands

A, B, C, D = "127.9.9.11", "127.9.9.12", "127.9.9.13", "127.9.9.21"


def test_isolate_drops_both_directions_between_the_node_and_every_other():
    drops = nft.isolate(A, [A, B, C, D])
    assert drops == [nft.Drop(frozenset({A}), frozenset({B, C, D})),
                     nft.Drop(frozenset({B, C, D}), frozenset({A}))]
    text = nft.ruleset("raftka_x", drops)
    assert "ip saddr { 127.9.9.11 } ip daddr { 127.9.9.12, 127.9.9.13, 127.9.9.21 } " \
           "counter drop" in text
    assert "ip saddr { 127.9.9.12, 127.9.9.13, 127.9.9.21 } ip daddr { 127.9.9.11 } " \
           "counter drop" in text
    # rebuilt in one transaction: applying again replaces, never adds to, the fault
    assert text.startswith("add table ip raftka_x\ndelete table ip raftka_x\ntable ip raftka_x {")
    assert "type filter hook output priority filter; policy accept;" in text


def test_split_bridge_one_way_and_loss():
    assert nft.split([A, B], [C]) == [nft.Drop(frozenset({A, B}), frozenset({C})),
                                      nft.Drop(frozenset({C}), frozenset({A, B}))]
    # the bridge node is on neither side: it reaches both, they do not reach each other
    assert nft.bridge([A, B], [B, C], B) == nft.split([A], [C])
    assert nft.one_way([A], [B, C]) == [nft.Drop(frozenset({A}), frozenset({B, C}))]
    lossy = nft.loss(D, [A, B, D], 10)
    assert [d.percent for d in lossy] == [10, 10]
    assert "numgen random mod 100 < 10 counter drop" in nft.ruleset("raftka_l", lossy)
    with pytest.raises(nft.NetFaultError, match="both sides"):
        nft.split([A, B], [B])
    with pytest.raises(nft.NetFaultError, match="1..100"):
        nft.loss(D, [A], 0)


@pytest.mark.parametrize("address, why", [
    ("127.0.0.1", "other than 127.0.0.1"),      # everyone's: clients and other programs
    ("10.0.0.5", "loopback"),                    # never a real network
    ("localhost", "not an IPv4 address"),
    ("::1", "not an IPv4 address"),
])
def test_only_nodes_own_loopback_addresses_are_matched(address, why):
    with pytest.raises(nft.NetFaultError, match=why):
        nft.isolate(address, [A, B])


def test_tables_are_ours_by_name():
    for bad in ("filter", "raftka_", "raftka_x; flush ruleset", "RAFTKA_x"):
        with pytest.raises(nft.NetFaultError, match="must match"):
            nft.ruleset(bad, nft.isolate(A, [B]))
    with pytest.raises(nft.NetFaultError, match="must match"):
        nft.Nft().remove("inet filter")
    with pytest.raises(nft.NetFaultError, match="names no address"):
        nft.isolate(A, [A])


def test_missing_tools_are_named():
    with pytest.raises(nft.NetFaultUnavailable, match="apt-get install -y nftables"):
        nft.Nft(binary="nft-not-installed-here").check()
    with pytest.raises(nft.NetFaultUnavailable, match="apt-get install -y iproute2"):
        Tc(binary="tc-not-installed-here").apply([A], Shape(rate_kbit=100))


def test_tc_commands_classify_both_directions_of_each_address_only():
    cmds = commands([D, A], Shape(rate_kbit=800))
    assert cmds[0] == ["qdisc", "add", "dev", "lo", "root", "handle", "5a7f:", "htb"]
    assert cmds[1][-4:] == ["rate", "800kbit", "ceil", "800kbit"]
    filters = [c for c in cmds if c[0] == "filter"]
    assert [(c[c.index("match") + 2], c[c.index("match") + 3]) for c in filters] == [
        ("src", f"{A}/32"), ("dst", f"{A}/32"), ("src", f"{D}/32"), ("dst", f"{D}/32")]
    assert not any("netem" in c for c in cmds)       # a rate limit needs only HTB


def test_tc_netem_arguments():
    shape = Shape(delay_ms=40, jitter_ms=10, loss_percent=2, reorder_percent=5)
    netem = next(c for c in commands([A], shape) if "netem" in c)
    assert netem[netem.index("netem") + 1:] == ["delay", "40ms", "10ms", "loss", "2%",
                                                "reorder", "5%"]
    with pytest.raises(nft.NetFaultError, match="reorder needs delay_ms"):
        commands([A], Shape(reorder_percent=5))
    with pytest.raises(nft.NetFaultError, match="rate limit or a netem"):
        commands([A], Shape())
    with pytest.raises(nft.NetFaultError, match="other than 127.0.0.1"):
        commands(["127.0.0.1"], Shape(rate_kbit=100))
