"""The metadata quorum: 3 controllers replicating the metadata log with pysyncobj (Raft).

Commands become metadata records (`records.py`), committed through Raft (`quorum/`) and replayed
into an immutable image (`image.py`) by `controller/`'s control managers; `service.py` is the
trio edge (listener, metadata stream for brokers, heartbeats).

Layer: a server. Imports `common/` and `wire/` only — never the broker; the broker may read
this package's records and image (and the read-only queries over them).
"""
