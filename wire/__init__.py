"""The Kafka wire protocol, sans-IO: bytes in, typed messages out, and back.

Layer: the bottom. No sockets, no trio, no clocks, and nothing else of Raftka: every other
package builds on it. Generated message classes (`messages/`, from the JSON schemas by
`codegen/`), framing and headers, record batches and codecs (`records/`), error codes.
"""
