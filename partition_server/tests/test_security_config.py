"""Listener parsing and TLS contexts from a generated dev CA."""

import ssl
import socket
import threading

import pytest

from common import listeners as L
from common import tls


def test_listener_set_defaults_and_map():
    ls = L.resolve("SASL_SSL://0.0.0.0:9093,INTERNAL://127.0.0.1:9094",
                   "SASL_SSL://broker1.example:9093", "INTERNAL:SASL_PLAINTEXT", "INTERNAL")
    assert [x.protocol for x in ls.bound] == ["SASL_SSL", "SASL_PLAINTEXT"]
    assert ls.advertised_for("SASL_SSL").host == "broker1.example"
    assert ls.advertised_for("INTERNAL").port == 9094          # not advertised → bound one
    assert ls.inter_broker == "INTERNAL"
    assert ls.bound[0].uses_tls and ls.bound[0].uses_sasl and not ls.bound[1].uses_tls
    plain = L.resolve(["PLAINTEXT://127.0.0.1:9092", "CONTROLLER://127.0.0.1:9093"])
    assert [x.name for x in plain.bound] == ["PLAINTEXT"] and plain.inter_broker == "PLAINTEXT"


@pytest.mark.parametrize("args,needle", [
    (("FOO://h:1",), "protocol.map"),
    (("PLAINTEXT://h:1,PLAINTEXT://h:2",), "twice"),
    (("PLAINTEXT://h",), "NAME://host:port"),
    (("PLAINTEXT://h:1", "SSL://h:2"), "not bound"),
    (("PLAINTEXT://h:1", None, "X:TLS"), "PROTOCOL"),
    (("PLAINTEXT://h:1", None, None, "SSL"), "inter.broker.listener.name"),
])
def test_listener_errors_are_clear(args, needle):
    with pytest.raises(L.ListenerConfigError, match=needle):
        L.resolve(*args)


def test_listener_setting_prefix():
    props = {"sasl.enabled.mechanisms": "PLAIN",
             "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    assert L.listener_setting(props, "SASL_SSL", "sasl.enabled.mechanisms") == "SCRAM-SHA-512"
    assert L.listener_setting(props, "OTHER", "sasl.enabled.mechanisms") == "PLAIN"


def _handshake(server_ctx, client_ctx):
    a, b = socket.socketpair()
    result = {}

    def serve():
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                result["principal"] = tls.peer_principal(s)
                s.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            result["error"] = exc

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname="127.0.0.1") as c:
            c.recv(2)
    finally:
        t.join(5)
    return result


def test_dev_ca_server_and_client_certificates(tmp_path):
    paths = tls.generate_dev_ca(tmp_path, clients=["alice"])
    assert (tmp_path / "server.pem").stat().st_mode & 0o077 == 0        # key not world-readable
    server = tls.server_context(str(paths["server"]))
    assert "principal" in _handshake(server, tls.client_context(str(paths["ca"])))
    # a client that does not trust the CA refuses the server
    with pytest.raises(ssl.SSLError):
        _handshake(server, ssl.create_default_context())
    # client certificate required: its subject becomes the principal
    mtls = tls.server_context(str(paths["server"]), truststore=str(paths["ca"]), client_auth="required")
    client = tls.client_context(str(paths["ca"]), str(paths["client:alice"]))
    assert _handshake(mtls, client)["principal"] == "User:CN=alice"


def test_tls_config_errors(tmp_path):
    with pytest.raises(tls.TlsConfigError, match="keystore"):
        tls.server_context("")
    with pytest.raises(tls.TlsConfigError, match="keystore.location"):
        tls.server_context(str(tmp_path / "missing.pem"))
    paths = tls.generate_dev_ca(tmp_path)
    with pytest.raises(tls.TlsConfigError, match="truststore"):
        tls.server_context(str(paths["server"]), client_auth="required")
    with pytest.raises(tls.TlsConfigError, match="client.auth"):
        tls.server_context(str(paths["server"]), client_auth="maybe")


def test_configs_secure_example_is_valid(tmp_path):
    """configs/secure/*.properties parse, and their listeners build TLS + SASL security."""
    from pathlib import Path
    from common.properties import parse_properties as load_properties
    from metadata_quorum.config import ControllerConfig
    from partition_server.config import BrokerConfig
    from common.listener_security import controller_listener_security
    from partition_server.security import setup
    folder = Path(__file__).resolve().parents[2] / "configs" / "secure"
    certs = tls.generate_dev_ca(tmp_path)

    def props(name):
        p = load_properties((folder / name).read_text())
        p["ssl.keystore.location"], p["ssl.truststore.location"] = str(certs["server"]), str(certs["ca"])
        return p

    for b in (0, 1, 2):
        config = BrokerConfig.from_properties(props(f"broker-{b}.properties"))
        built = setup.broker_listeners(config, lambda u, m: None)
        assert [(x.name, s.protocol, s.ssl_context is not None) for x, s in built] == [
            ("SASL_SSL", "SASL_SSL", True), ("INTERNAL", "SASL_PLAINTEXT", False)]
        assert setup.build_authorizer(type("I", (), {"acls": {}})(), config.values.get) is not None
    for cid in (3000, 3001, 3002):
        cfg = ControllerConfig.from_properties(props(f"controller-{cid}.properties"))
        sec = controller_listener_security(cfg.props, lambda: None)
        assert sec.protocol == "SASL_SSL" and sec.allowed_principals == {"User:admin",
                                                                         "User:raftka-inter-node"}


def test_bad_security_settings_are_config_errors(tmp_path):
    from metadata_quorum.config import ConfigError, ControllerConfig
    from partition_server.config import BrokerConfig
    base = {"node.id": "0", "controller.quorum.voters": "3000@127.0.0.1:1"}
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        BrokerConfig.from_properties({**base, "listeners": "SASL_SSL://127.0.0.1:9093"})
    with pytest.raises(ConfigError, match="sasl.enabled.mechanisms.*GSSAPI"):
        BrokerConfig.from_properties({**base, "listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
                                      "sasl.enabled.mechanisms": "GSSAPI"})
    with pytest.raises(ConfigError, match="go together"):
        BrokerConfig.from_properties({**base, "raftka.inter.node.sasl.username": "x"})
    with pytest.raises(ConfigError, match="ssl.client.auth"):
        BrokerConfig.from_properties({**base, "ssl.client.auth": "maybe"})
    ctrl = {"node.id": "3000", "controller.quorum.voters": "3000@127.0.0.1:1",
            "raftka.controller.raft.peers": "3000@127.0.0.1:2",
            "listeners": "CONTROLLER://127.0.0.1:1",
            "listener.security.protocol.map": "CONTROLLER:SASL_SSL"}
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        ControllerConfig.from_properties(ctrl)
    paths = tls.generate_dev_ca(tmp_path)
    assert ControllerConfig.from_properties({**ctrl, "ssl.keystore.location": str(paths["server"])})


def test_per_listener_overrides(tmp_path):
    from metadata_quorum.config import ConfigError
    from partition_server.config import BrokerConfig
    from partition_server.security import setup
    paths = tls.generate_dev_ca(tmp_path)
    base = {"node.id": "0", "controller.quorum.voters": "3000@127.0.0.1:1",
            "listeners": "SASL_SSL://127.0.0.1:9093,INTERNAL://127.0.0.1:9094",
            "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.ssl.keystore.location": str(paths["server"]),
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.internal.connections.max.reauth.ms": "5000"}
    config = BrokerConfig.from_properties(base)
    built = {x.name: sec for x, sec in setup.broker_listeners(config, lambda u, m: None)}
    assert built["SASL_SSL"].mechanisms == ("SCRAM-SHA-512",) and built["SASL_SSL"].ssl_context
    assert built["INTERNAL"].mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert built["INTERNAL"].reauth_ms == 5000 and built["SASL_SSL"].reauth_ms == 0
    for key, needle in (("listener.name.nope.ssl.client.auth", "no listener named NOPE"),
                        ("listener.name.internal.scram-sha-512.sasl.jaas.config", "not supported"),
                        ("listener.name.internal.connections.max.reauth.ms", "not an integer")):
        with pytest.raises(ConfigError, match=needle):
            BrokerConfig.from_properties({**base, key: "x"})
