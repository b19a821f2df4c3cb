"""``open_store(url)``: the one way to get an object store.

Accepted URLs:

* ``memory://`` (a fresh in-memory store) or ``memory://NAME`` (one shared in-process store per name)
* ``file:///abs/dir``, or a plain filesystem path (relative paths are resolved against the current
  directory); the directory is created if missing. Every write is synced to the device, file and
  directory entry, before it returns; ``file:///abs/dir?sync=false`` (or ``open_store(path,
  sync="false")``, or ``SLATEDB_FILE_SYNC=false`` for URLs that do not say) turns that off for
  tests and benchmarks (docs/operations.md)
* ``s3://bucket[/prefix]`` with settings from the query string or the standard AWS environment
  variables: ``endpoint`` (``AWS_ENDPOINT_URL``/``AWS_ENDPOINT``), ``region``
  (``AWS_REGION``/``AWS_DEFAULT_REGION``), ``access_key_id``, ``secret_access_key``,
  ``session_token`` (``AWS_ACCESS_KEY_ID`` ...), ``allow_http`` (``AWS_ALLOW_HTTP``) and
  ``virtual_hosted_style`` (default false when an endpoint is given); for an S3-compatible store
  without conditional writes, ``txn`` (or ``SLATEDB_TXN_URL``): a URL-encoded transactional-store
  URL (``sqlite:///abs/path.db``, ``postgresql://user@host:port/db``) that turns on two-phase CAS
  (:mod:`slatedb_core.store.twophase`)

Anything else raises :class:`~slatedb_core.errors.InvalidArgument`.

:func:`store_location` names where a store's objects live, independently of the URL spelling that
opened it (two-phase CAS keys its intents by it: docs/two-phase-cas.md).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from obstore.store import LocalStore, MemoryStore, S3Store

from slatedb_core.errors import InvalidArgument, StoreDirectoryMissing
from slatedb_core.store.local_cas import LocalCas
from slatedb_core.store.local_fs import LocalFiles
from slatedb_core.store.objectstore import ObjectStore, ObstoreObjectStore, validate_relative_path
from slatedb_core.store.redact import redact_url
from slatedb_core.store.twophase import open_two_phase

_S3_KEYS = {
    "endpoint": ("AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
    "allow_http": ("AWS_ALLOW_HTTP",),
    "virtual_hosted_style": ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST",),
}
_FILE_KEYS = ("sync",)
"""file:// options: ``sync`` (default true) syncs every write, file and directory entry, before
it returns (slatedb_core.store.local_fs); ``sync=false`` is for tests and benchmarks only."""
log = logging.getLogger(__name__)

SYNC_ENV = "SLATEDB_FILE_SYNC"
"""``sync`` of local-filesystem stores whose URL does not set it (the test suite sets false)."""
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

_SCHEME_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# Lenient on case and '_' (legacy us-east-1 names, MinIO); rejects spaces, ':port', 'user@'.
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,62}$")
_HOST = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9._-]*[A-Za-z0-9_])?$")

TXN_ENV = "SLATEDB_TXN_URL"
"""Transactional store for two-phase CAS on s3:// URLs that carry no ``txn`` query key."""

_named_memory: dict[str, ObjectStore] = {}
_named_lock = threading.Lock()


def open_store(url: str | os.PathLike[str], **overrides: str) -> ObjectStore:
    """Open the object store named by ``url``. ``overrides`` take precedence over the query string."""
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgument("store URL must be a non-empty string")
    url = url.strip()
    if "://" not in url:
        if _SCHEME_LIKE.match(url):
            raise InvalidArgument(
                f"{redact_url(url)!r} looks like a URL without '//' (e.g. file:relative); use "
                "file:///absolute/path, or prefix a relative path that contains ':' with ./"
            )
        return _local(Path(url), original=url, query={}, overrides=overrides)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        return _memory(parts.netloc + parts.path.rstrip("/"))
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidArgument(
                f"file URL must be file:///absolute/path (got host {parts.netloc!r} in {redact_url(url)!r})"
            )
        if parts.fragment:
            raise InvalidArgument(f"file URL takes no fragment: {redact_url(url)!r}")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise InvalidArgument(f"file URL needs an absolute path: {redact_url(url)!r}")
        query = _query(parts.query, url)
        return _local(Path(path), original=url, query=query, overrides=overrides)
    if scheme == "s3":
        if parts.fragment:
            raise InvalidArgument(f"s3 URL takes no fragment: {redact_url(url)!r}")
        # strict: a piece without '=' is refused, not dropped (a secret holding a raw '&'
        # would be cut there, and the cut-off piece shown as a key: issue 39, item 3)
        query = {k: v for k, v in _query(parts.query, url).items() if v}
        txn_url = overrides.pop("txn", None) or query.pop("txn", None) or os.environ.get(TXN_ENV)
        store = _s3(parts.netloc, unquote(parts.path), query, overrides, url)
        if txn_url:
            return open_two_phase(store, txn_url)
        return store
    raise InvalidArgument(
        f"unsupported store URL {redact_url(url)!r}: use memory://, file:///abs/dir, a filesystem path, "
        "or s3://bucket/prefix"
    )


def local_directory(url: str | os.PathLike[str]) -> Path | None:
    """The folder a ``file://`` URL or a plain path names (resolved as :func:`open_store`
    resolves it), or None for any other store (no check of the URL: :func:`open_store` does)."""
    text = os.fspath(url).strip()
    if "://" not in text:
        return None if _SCHEME_LIKE.match(text) else Path(text).expanduser().resolve()
    parts = urlsplit(text)
    if parts.scheme.lower() != "file":
        return None
    return Path(unquote(parts.path)).expanduser().resolve()


def require_store_directory(url: str | os.PathLike[str], what: str = "the URL") -> None:
    """Raise :class:`StoreDirectoryMissing` when ``url`` is a local store whose folder does not
    exist: for callers that only use an existing store, where :func:`open_store` would create
    an empty folder and then report the table or database missing in it (issue 40, item 6)."""
    directory = local_directory(url)
    if directory is not None and not directory.exists():
        raise StoreDirectoryMissing(
            str(directory), f"does not exist: create it, or fix {what}'s path"
        )


def _memory(name: str) -> ObjectStore:
    if not name:
        return ObstoreObjectStore(MemoryStore(), url="memory://", sorted_listing=False)
    with _named_lock:
        store = _named_memory.get(name)
        if store is None:
            store = ObstoreObjectStore(MemoryStore(), url=f"memory://{name}", sorted_listing=False)
            _named_memory[name] = store
        return store


def _query(text: str, url: str) -> dict[str, str]:
    """A URL's query keys; a malformed query or a repeated key is InvalidArgument."""
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text))
    except ValueError:
        # not parse_qsl's message: it quotes the piece, which may be part of a secret
        raise InvalidArgument(
            f"malformed query in {redact_url(url)!r}: every option is key=value "
            "(percent-encode '&', '#' and '%' in a value)"
        ) from None
    query = dict(pairs)
    if len(query) != len(pairs):
        raise InvalidArgument(f"repeated query key in {redact_url(url)!r}")
    return query


_warned_unsynced: set[str] = set()


def _warn_unsynced(source: str) -> None:
    """Say once per process and source that local writes are not synced: ``sync=false`` is for
    tests and benchmarks, and a stray environment variable must not turn durability off
    silently in production (docs/operations.md)."""
    with _named_lock:
        if source in _warned_unsynced:
            return
        _warned_unsynced.add(source)
    log.warning(
        "file:// stores opened with writes NOT synced to the device (%s): an acknowledged write "
        "can be lost or left empty by a power loss; for tests and benchmarks only",
        source,
    )


def _local(
    path: Path, *, original: str, query: dict[str, str], overrides: dict[str, str]
) -> ObjectStore:
    unknown = (set(query) | set(overrides)) - set(_FILE_KEYS)
    if unknown:
        raise InvalidArgument(
            f"unknown file store option(s) {sorted(unknown)} in {redact_url(original)!r}; "
            f"known: {sorted(_FILE_KEYS)}"
        )
    settings = {**query, **overrides}
    if "sync" in settings:
        sync = _bool("sync", settings["sync"])
        source = "the store's sync option"
    else:
        sync = _bool(SYNC_ENV, os.environ.get(SYNC_ENV) or "true")
        source = f"{SYNC_ENV} in the environment"
    if not sync:
        _warn_unsynced(source)
    if any(seg == ".." for seg in path.parts):
        raise InvalidArgument(f"store path must not contain '..': {original!r}")
    if "\x00" in str(path):
        raise InvalidArgument(f"store path contains a NUL byte: {original!r}")
    # expanduser (unknown ~user: RuntimeError) and stat (name too long, permission: OSError)
    # fail with the caller's input, not with our state: report them as a bad argument.
    existed = True
    try:
        root = path.expanduser().resolve()
        if root.exists() and not root.is_dir():
            raise InvalidArgument(f"store path exists and is not a directory: {root}")
        existed = root.exists()
        files = LocalFiles(root, sync=sync)
        files.ensure_root()
    except (OSError, RuntimeError) as e:
        if isinstance(e, OSError) and not existed:
            # the folder is missing and we may not make it: blame the path, not the URL
            raise StoreDirectoryMissing(
                str(root),
                f"does not exist and cannot be created ({e.strerror or e}): create it, or fix "
                "the URL's path",
            ) from e
        raise InvalidArgument(f"cannot use {original!r} as a store directory: {e}") from e
    # LocalFiles does every write (synced: local_fs) and, through its LocalRoot, every read and
    # listing: beneath the root, no symbolic link followed (local_root, SECURITY.md). obstore's
    # LocalStore (which follows links) is kept only as the raw ``inner`` handle and serves none.
    inner = LocalStore(root, mkdir=True)
    # LocalStore lists in directory order: sorted_listing=False makes the adapter sort.
    return ObstoreObjectStore(
        inner,
        url=root.as_uri(),
        sorted_listing=False,
        local_cas=LocalCas(files),
        local_root=root,
    )


def _check_endpoint(endpoint: str) -> None:
    """An http(s) URL with a host and a valid port, no credentials: obstore panics (a
    BaseException) at the first request on a bad host or port, and shows the endpoint, userinfo
    included, in every request error."""
    try:
        ep = urlsplit(endpoint)
        host, _port = ep.hostname or "", ep.port  # .port raises ValueError if not 0-65535
        ok = ep.scheme in ("http", "https") and bool(_HOST.match(host) or _is_ipv6(host))
    except ValueError:
        ok = False
    if not ok:
        raise InvalidArgument(
            f"s3 endpoint must be an http(s) URL with a host (and a port 0-65535), got "
            f"{redact_url(endpoint)!r}"
        )
    if "@" in ep.netloc:
        raise InvalidArgument(
            f"s3 endpoint {redact_url(endpoint)!r} carries credentials: give them as "
            "access_key_id and secret_access_key"
        )


_HEADER_FIELDS = ("access_key_id", "secret_access_key", "session_token", "region")
"""S3 settings obstore signs into request headers (``Authorization``, ``x-amz-security-token``)."""


def _check_header_values(settings: dict[str, str]) -> None:
    """Refuse a credential or region holding a control character (C0, DEL or C1), from the URL,
    an override or the environment alike: obstore builds a header from it and panics at every
    request, a ``PanicException`` that ``except Exception`` does not catch (review of issue 39).
    The message names the field, never its value (SECURITY.md: secrets stay secret)."""
    for field in _HEADER_FIELDS:
        value = settings.get(field)
        if value is not None and any(c < " " or "\x7f" <= c <= "\x9f" for c in value):
            raise InvalidArgument(
                f"s3 {field} holds a control character (a newline, CR, NUL, DEL, ...): "
                "check how it was copied (the value is not shown)"
            )


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidArgument(f"{name} must be true or false, got {value!r}")


def _s3(
    bucket: str, path: str, query: dict[str, str], overrides: dict[str, str], url: str
) -> ObjectStore:
    if not bucket:
        raise InvalidArgument(f"s3 URL needs a bucket: {redact_url(url)!r}")
    if not _BUCKET.match(bucket):
        raise InvalidArgument(
            f"s3 bucket {urlsplit(redact_url(url)).netloc!r} is not a bucket name (3-63 of "
            f"a-z, 0-9, '.', '-', '_'): {redact_url(url)!r}"
        )
    unknown = set(query) - set(_S3_KEYS)
    if unknown:
        raise InvalidArgument(
            f"unknown s3 URL option(s) {sorted(unknown)}; known: {sorted(_S3_KEYS)}"
        )
    prefix = path.strip("/")
    if prefix:
        validate_relative_path(prefix, what="s3 prefix")
    settings: dict[str, str] = {}
    for key, env_names in _S3_KEYS.items():
        value = overrides.get(key) or query.get(key)
        if value is None:
            value = next((os.environ[e] for e in env_names if os.environ.get(e)), None)
        if value is not None:
            settings[key] = value
    _check_header_values(settings)
    endpoint = settings.get("endpoint")
    if endpoint is not None:
        _check_endpoint(endpoint)
    allow_http = _bool("allow_http", settings.get("allow_http", "false"))
    if endpoint and endpoint.startswith("http://") and not allow_http:
        raise InvalidArgument(
            f"endpoint {redact_url(endpoint)!r} is plain http: add allow_http=true"
        )
    # copy_if_not_exists=multipart: ObjectStore.copy_if_absent as a one-part multipart upload
    # (UploadPartCopy) completed with If-None-Match: *, the conditional copy S3 supports.
    config: dict[str, Any] = {"conditional_put": "etag", "copy_if_not_exists": "multipart"}
    for key in ("endpoint", "region", "access_key_id", "secret_access_key", "session_token"):
        if key in settings:
            config[key] = settings[key]
    config.setdefault("region", "us-east-1")
    vhost_default = "false" if endpoint else "true"
    config["virtual_hosted_style_request"] = _bool(
        "virtual_hosted_style", settings.get("virtual_hosted_style", vhost_default)
    )
    try:
        inner = S3Store(
            bucket,
            prefix=prefix or None,
            config=config,  # type: ignore[arg-type]
            client_options={"allow_http": allow_http, "timeout": "30s", "connect_timeout": "5s"},
            retry_config={
                "max_retries": 3,
                "retry_timeout": timedelta(seconds=20),
                "backoff": {
                    "init_backoff": timedelta(milliseconds=50),
                    "max_backoff": timedelta(seconds=1),
                    "base": 2,
                },
            },
        )
    except Exception as e:
        raise InvalidArgument(f"cannot configure S3 store for s3://{bucket}: {e}") from e
    shown = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    return ObstoreObjectStore(inner, url=shown, sorted_listing=True)
