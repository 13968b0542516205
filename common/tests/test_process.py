"""common.process: what both node entry points share."""


def test_open_file_limit_is_raised_as_far_as_allowed_and_never_lowered():
    import resource

    from common.process import raise_open_file_limit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    got = raise_open_file_limit()
    now_soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert got == now_soft >= soft
    assert now_soft >= min(hard, 1 << 20) or hard == resource.RLIM_INFINITY


def test_source_address_is_where_every_connection_leaves_from():
    """On lo the kernel picks 127.0.0.1 as the source of every connection; a node at its own
    address pins it (raftka.network.source.address) so faults by address see its links."""
    import socket

    import pytest
    import trio

    from common import connection
    from common.process import install_source_address
    from common.properties import ConfigError

    with pytest.raises(ConfigError, match="not an address of this machine"):
        install_source_address({"raftka.network.source.address": "192.0.2.250"})
    assert connection.source_address() is None
    server = socket.socket()
    server.bind(("127.77.1.12", 0))
    server.listen()

    async def peer_of_a_new_connection():
        stream = await connection.open_tcp_stream(*server.getsockname())
        accepted, peer = server.accept()
        accepted.close()
        await stream.aclose()
        return peer[0]
    try:
        assert trio.run(peer_of_a_new_connection) == "127.0.0.1"      # the kernel's choice
        install_source_address({"raftka.network.source.address": "127.77.1.11"})
        assert trio.run(peer_of_a_new_connection) == "127.77.1.11"
    finally:
        connection.set_source_address(None)
        server.close()

