"""The `raftka` command: run nodes, a dev cluster, and admin/produce/consume tools.

Layer: the top. May use anything (it starts controllers and brokers); the `--command-config`
properties become each client's `ClientSecurity`.
"""
