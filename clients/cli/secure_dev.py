"""`raftka dev --secure`: the local cluster with SASL_SSL everywhere.

- A throwaway CA and one server certificate for 127.0.0.1/localhost and every node's address
  (`<data-dir>/secure/`), generated on the first start and reused after (made anew when the
  nodes' addresses change).
- Client listeners SASL_SSL (SCRAM-SHA-512, also SCRAM-SHA-256 and PLAIN); the controllers'
  listener SASL_SSL too, open only to the inter-node user; the Raft port gets a random password
  (as without --secure: dev_raft_password).
- ACLs enforced (StandardAuthorizer semantics), `allow.everyone.if.no.acl.found=false`, one super
  user `admin` whose SCRAM credential is created through AlterUserScramCredentials once the
  cluster is up (as the inter-node user), so it lives in the metadata log like any other user.
- `<data-dir>/secure/client.properties`: a Kafka client properties file for the super user
  (security.protocol, sasl.mechanism, sasl.username/password, ssl.ca.location), usable with
  librdkafka-style clients and `--command-config`.

Secrets are random per data dir and stored in `<data-dir>/secure/secrets.properties` (mode 0600).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import trio

INTER_NODE_USER = "raftka-inter-node"
SUPER_USER = "admin"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def dev_raft_password(data_dir) -> str:
    """The Raft password of the dev cluster in `data_dir`: random on its first start, then read
    back (`<data-dir>/raft.password`, 0600), so restarts and `--add-broker` agree."""
    path = Path(data_dir) / "raft.password"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"raft.password.{os.getpid()}.tmp")
        _write_private(tmp, secrets.token_urlsafe(32) + "\n")
        try:
            os.link(tmp, path)          # atomic: a concurrent first start keeps the one linked first
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


class SecureDev:
    def __init__(self, layout):
        self.layout = layout
        self.dir = Path(layout.data_dir) / "secure"
        self._secrets = self._ensure()

    def _ensure(self) -> dict[str, str]:
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        # the server certificate names every address a node listens at (--node-addresses puts
        # each node at its own); a data dir first started with other addresses gets a new one
        hosts = sorted({"127.0.0.1", "localhost", *self.layout.node_hosts().values()})
        hosts_file = self.dir / "server.hosts"
        named = hosts_file.read_text().split() if hosts_file.exists() else \
            ["127.0.0.1", "localhost"]
        if not (self.dir / "server.pem").exists() or not set(hosts) <= set(named):
            from common.tls import generate_dev_ca
            generate_dev_ca(self.dir, hosts=hosts)
            hosts_file.write_text(" ".join(hosts) + "\n")
        path = self.dir / "secrets.properties"
        if not path.exists():
            values = {k: secrets.token_urlsafe(24) for k in
                      ("inter.node.password", "admin.password", "raft.password")}
            _write_private(path, "".join(f"{k}={v}\n" for k, v in values.items()))
        from common.properties import parse_properties
        return parse_properties(path.read_text())

    def _common(self) -> dict[str, str]:
        return {
            "ssl.keystore.location": str(self.dir / "server.pem"),
            "ssl.truststore.location": str(self.dir / "ca.pem"),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
            "super.users": f"User:{SUPER_USER}",
            "raftka.inter.node.sasl.mechanism": "SCRAM-SHA-512",
            "raftka.inter.node.sasl.username": INTER_NODE_USER,
            "raftka.inter.node.sasl.password": self._secrets["inter.node.password"],
        }

    def controller_properties(self) -> dict[str, str]:
        return self._common() | {
            "listener.security.protocol.map": "CONTROLLER:SASL_SSL",
            "raftka.controller.raft.password": self._secrets["raft.password"],
        }

    def broker_properties(self, broker_id: int) -> dict[str, str]:
        return self._common() | {
            "listeners": f"SASL_SSL://{self.layout.broker_host(broker_id)}:"
                         f"{self.layout.broker_port(broker_id)}",
            "raftka.controller.security.protocol": "SASL_SSL",
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
        }

    def inter_node_client_properties(self) -> dict[str, str]:
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": INTER_NODE_USER,
                "sasl.password": self._secrets["inter.node.password"],
                "ssl.ca.location": str(self.dir / "ca.pem")}

    def client_properties(self) -> dict[str, str]:
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": SUPER_USER, "sasl.password": self._secrets["admin.password"],
                "ssl.ca.location": str(self.dir / "ca.pem")}

    def bootstrap_super_user(self, timeout_s: float = 30.0) -> Path:
        """Create (or refresh) the super user's SCRAM credentials; write client.properties."""
        from clients.cli.users import alter
        password = self._secrets["admin.password"]

        async def go():
            with trio.fail_after(timeout_s):
                while True:
                    try:
                        results = await alter(self.layout.bootstrap_servers,
                                              self.inter_node_client_properties(),
                                              [(SUPER_USER, 2, password, 8192)])
                        if results.get(SUPER_USER, (1,))[0] == 0:
                            break
                    except Exception:  # noqa: BLE001 - retried until the deadline
                        pass
                    await trio.sleep(0.5)
                # SCRAM-SHA-256 too, for clients that only speak it
                await alter(self.layout.bootstrap_servers, self.inter_node_client_properties(),
                            [(SUPER_USER, 1, password, 8192)])
        trio.run(go)
        path = self.dir / "client.properties"
        _write_private(path, "# written by `raftka dev --secure`: the super user\n" + "".join(
            f"{k}={v}\n" for k, v in self.client_properties().items()))
        return path
