"""Kernel network faults between the nodes of a local cluster whose nodes have their own
loopback addresses: nftables partitions and loss (nft.py), tc shaping and netem (tc.py).
Used by `raftka dev isolate|heal` and the live tests (chaos_tests/)."""
