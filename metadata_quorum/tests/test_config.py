"""Controller config parsing: Kafka property names, clear errors naming the key."""

import pytest

from common.properties import ConfigError, parse_endpoint, parse_voters
from common.properties import parse_properties as load_properties
from metadata_quorum.config import ControllerConfig

GOOD = """
# a comment
! another comment
node.id=1
process.roles=controller
controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095
raftka.controller.raft.peers=1@127.0.0.1:19093,2@127.0.0.1:19094,3@127.0.0.1:19095
listeners=CONTROLLER://127.0.0.1:9093
metadata.log.dir=/tmp/x
broker.session.timeout.ms=6000
"""


def test_good_file_parses():
    cfg = ControllerConfig.from_properties(load_properties(GOOD))
    assert cfg.node_id == 1
    assert cfg.voters == {1: ("127.0.0.1", 9093), 2: ("127.0.0.1", 9094), 3: ("127.0.0.1", 9095)}
    assert cfg.raft_peers[3] == ("127.0.0.1", 19095)
    assert cfg.listener == ("127.0.0.1", 9093)
    assert cfg.metadata_dir == "/tmp/x"
    assert cfg.session_timeout_ms == 6000
    assert cfg.num_partitions == 1 and cfg.default_replication_factor == 1


def test_combined_mode_picks_controller_listener():
    props = load_properties(GOOD)
    props["listeners"] = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert ControllerConfig.from_properties(props).listener == ("127.0.0.1", 9093)


@pytest.mark.parametrize("key", ["node.id", "controller.quorum.voters", "listeners",
                                 "raftka.controller.raft.peers"])
def test_missing_required_key_is_named(key):
    props = load_properties(GOOD)
    del props[key]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ControllerConfig.from_properties(props)


@pytest.mark.parametrize("key,value", [("broker.session.timeout.ms", "abc"),
                                       ("broker.session.timeout.ms", "0"),
                                       ("num.partitions", "0"),
                                       ("node.id", "-3")])
def test_bad_numbers_are_reported_not_defaulted(key, value):
    props = load_properties(GOOD)
    props[key] = value
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ControllerConfig.from_properties(props)


def test_node_must_have_a_raft_address_and_peer_ids_must_match():
    props = load_properties(GOOD)
    props["node.id"] = "7"
    with pytest.raises(ConfigError, match="no address in raftka.controller.raft.peers"):
        ControllerConfig.from_properties(props)
    # a joining controller: not a voter, its own Raft address next to the voters'
    props["raftka.controller.raft.peers"] += ",7@127.0.0.1:19099"
    config = ControllerConfig.from_properties(props)
    assert config.joining and config.node_id not in config.voters
    assert not ControllerConfig.from_properties(load_properties(GOOD)).joining
    props = load_properties(GOOD)
    props["raftka.controller.raft.peers"] = "1@127.0.0.1:19093,2@127.0.0.1:19094"
    with pytest.raises(ConfigError, match="different ids"):
        ControllerConfig.from_properties(props)


def test_malformed_entries():
    with pytest.raises(ConfigError, match="line 1"):
        load_properties("no equals sign")
    with pytest.raises(ConfigError, match="id@host:port"):
        parse_voters("1@127.0.0.1")
    with pytest.raises(ConfigError, match="NAME://host:port"):
        parse_endpoint("127.0.0.1:9093")
    assert parse_endpoint("controller://h:1") == ("CONTROLLER", "h", 1)
    assert load_properties("a = b = c") == {"a": "b = c"}


def test_shipped_controller_configs_parse():
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2] / "configs"
    files = sorted(root.glob("three-controllers-three-brokers/controller-*.properties"))
    assert len(files) == 3
    ids = {ControllerConfig.from_properties(load_properties(f.read_text())).node_id for f in files}
    assert len(ids) == 3


# -- the Raft port's password (issue 20 item 6) ----------------------------------------------------

def _with_raft_host(host: str, password: str | None) -> dict:
    props = load_properties(GOOD)
    props["raftka.controller.raft.peers"] = \
        f"1@{host}:19093,2@127.0.0.1:19094,3@127.0.0.1:19095"
    if password is not None:
        props["raftka.controller.raft.password"] = password
    return props


@pytest.mark.parametrize("host", ["10.1.2.3", "0.0.0.0", "192.168.0.7", "controller-1.example",
                                  "::"])
@pytest.mark.parametrize("password", [None, "raftka-dev-only-password", "change-me",
                                      "change-me-raft", "CHANGEME", "please_change_me", "", "  "])
def test_refused_beyond_loopback_with_a_default_or_placeholder_password(host, password):
    with pytest.raises(ConfigError) as info:
        ControllerConfig.from_properties(_with_raft_host(host, password))
    message = str(info.value)
    assert "raftka.controller.raft.password" in message
    assert "secrets.token_urlsafe" in message          # says how to make one
    if password is None or not password.strip():
        assert "not set" in message or "empty" in message
    else:
        assert repr(password) in message or "development password" in message


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.13", "127.255.0.1", "localhost",
                                  "LOCALHOST", "::1"])
@pytest.mark.parametrize("password", [None, "raftka-dev-only-password", "change-me"])
def test_loopback_accepts_the_development_password(host, password):
    cfg = ControllerConfig.from_properties(_with_raft_host(host, password))
    assert cfg.password == (password or "raftka-dev-only-password")


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3"])
def test_empty_password_is_refused_everywhere(host):
    # set but empty is a mistake wherever the port is (pysyncobj would still use "" as a key)
    with pytest.raises(ConfigError, match="empty"):
        ControllerConfig.from_properties(_with_raft_host(host, ""))


@pytest.mark.parametrize("host", ["10.1.2.3", "controller-1.example", "127.0.0.1"])
def test_a_real_password_is_accepted_anywhere(host):
    secret = "v3Ry-l0ng-rand0m-Secret-xQ9"
    assert ControllerConfig.from_properties(_with_raft_host(host, secret)).password == secret


def test_only_this_controllers_own_raft_address_counts():
    # peers elsewhere are not this node's port; its own loopback port is what it binds
    props = load_properties(GOOD)
    props["raftka.controller.raft.peers"] = "1@127.0.0.1:19093,2@10.0.0.2:19094,3@10.0.0.3:1"
    assert ControllerConfig.from_properties(props).password == "raftka-dev-only-password"


def test_raft_password_problem_is_none_for_good_cases():
    from metadata_quorum.config import is_loopback, raft_password_problem
    assert raft_password_problem("127.0.0.1", None) is None
    assert raft_password_problem("10.0.0.1", "s3cret-but-real") is None
    assert raft_password_problem("10.0.0.1", None) is not None
    assert is_loopback("127.0.0.11") and not is_loopback("128.0.0.1")
    assert not is_loopback("localhost.evil.example")


def test_shipped_configs_start_on_loopback_and_are_refused_when_moved_beyond_it(tmp_path):
    """The shipped files leave the Raft password unset (with the instruction in a comment): they
    parse as they are (loopback), and the same file with a routable Raft address is refused."""
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2] / "configs"
    files = sorted(root.glob("*/controller-*.properties")) + [root / "single-node/server.properties"]
    assert len(files) == 7
    for f in files:
        text = f.read_text()
        assert "secrets.token_urlsafe" in text and "change-me-raft" not in text, f
        props = load_properties(text)
        assert "raftka.controller.raft.password" not in props, f
        if "ssl.keystore.location" in props:        # configs/secure: certificates made here
            from common.tls import generate_dev_ca
            certs = generate_dev_ca(tmp_path)
            props["ssl.keystore.location"] = str(certs["server"])
            props["ssl.truststore.location"] = str(certs["ca"])
        cfg = ControllerConfig.from_properties(props)
        moved = dict(props, **{"raftka.controller.raft.peers": ",".join(
            f"{nid}@192.0.2.{nid % 250}:{port}" for nid, (_, port) in cfg.raft_peers.items())})
        with pytest.raises(ConfigError, match="beyond loopback"):
            ControllerConfig.from_properties(moved)


def test_refused_under_python_optimize():
    """pysyncobj's replay checks are `assert`s: a controller must not run with them stripped."""
    import pathlib
    import subprocess
    import sys
    code = ("from common.properties import parse_properties\n"
            "from metadata_quorum.config import ControllerConfig, ConfigError\n"
            "import sys\n"
            "try:\n"
            f"    ControllerConfig.from_properties(parse_properties({GOOD!r}))\n"
            "except ConfigError as exc:\n"
            "    print(exc); sys.exit(3)\n")
    for flags, expect in ((["-O"], 3), ([], 0)):
        run = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True,
                             text=True, timeout=60,
                             cwd=pathlib.Path(__file__).resolve().parents[2])
        assert run.returncode == expect, run.stdout + run.stderr
        if expect:
            assert "PYTHONOPTIMIZE" in run.stdout
