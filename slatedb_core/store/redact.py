"""Store URLs as error messages may show them: credentials replaced by ``***``.

A store URL can carry secrets (``s3://bucket?secret_access_key=...``, a two-phase ``txn`` URL
with a PostgreSQL password, ``postgresql://user:password@host/db``), and error messages end up
in logs, Dagster's event log and Spark's driver output. Every message that names a URL the
caller gave names :func:`redact_url` of it.

A URL is shown only where its reading is unambiguous: a ``postgresql://`` URL is split the way
libpq splits it (:mod:`slatedb_core.store.pgurl`), and any other URL whose host part holds a
``:`` that is not a port, or is followed by an ``@`` (a password holding ``/``, ``?`` or ``#``
unencoded), or whose fragment holds an ``@``, is masked whole after its scheme. Query keys are
shown only when they look like keys (a ``key=value`` piece); values only for the plain settings.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote_plus, urlsplit, urlunsplit

from slatedb_core.store.pgurl import PgUrlError, is_pg_url, split_userinfo

# Query keys whose values are not secret (everything else is shown as ***).
_PLAIN_KEYS = frozenset(
    {
        "endpoint",
        "region",
        "allow_http",
        "virtual_hosted_style",
        "sync",
        "sslmode",
        "connect_timeout",
        "target_session_attrs",
        "application_name",
    }
)
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.,:-]{0,64}")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_PORT = re.compile(r"[0-9]*")
_MASK = "***"
_USERINFO = re.compile(r":[^/@]*@")


def redact_url(url: str) -> str:
    """``url`` with its password and every query value but the plain settings masked; a string
    that does not parse as a URL, or parses two ways, is masked whole after its scheme, anything
    but a str whole. Never raises."""
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    head = url.split("://", 1)[0] if "://" in url else ""
    masked = f"{head}://{_MASK}" if head else _MASK
    try:
        if is_pg_url(url):
            return _redact_pg(url)
        parts = urlsplit(url)
        if not parts.scheme and "://" in url:  # a scheme urlsplit refuses (my_s3://): its own
            rest = url.split("://", 1)[1]
            return head + redact_url("x://" + rest)[1:]
        netloc = parts.netloc
        if "@" in parts.fragment or _ambiguous_host(url, netloc):
            return masked
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{_MASK}@{host}" if ":" in userinfo else f"{user}@{host}"
        # no netloc (s3:/user:password@bucket, one slash short): a userinfo-like part masked
        path = parts.path if parts.netloc else _USERINFO.sub(f":{_MASK}@", parts.path)
        return urlunsplit(
            (parts.scheme, netloc, path, _redact_query(parts.query), parts.fragment and _MASK)
        )
    except (ValueError, PgUrlError):
        return masked


def _ambiguous_host(url: str, netloc: str) -> bool:
    """True when ``netloc`` may be the start of a userinfo that urlsplit cut at ``/``, ``?`` or
    ``#``: it holds a ``:`` that is not a port, or a ``:`` and an ``@`` follows it."""
    host = netloc.rsplit("@", 1)[-1].rsplit("]", 1)[-1]  # an IPv6 literal's colons: no port
    if ":" not in host:
        return False
    if not _PORT.fullmatch(host.rsplit(":", 1)[1]):
        return True
    after = url.split("://", 1)[1] if "://" in url else url
    return "@" in after[len(netloc) :]


def _redact_query(query: str) -> str:
    """Each ``key=value`` piece with its value masked unless the key is a plain setting; a piece
    that is not ``key=value`` with a key-like key (a piece of a password holding ``&``) masked
    whole."""
    if not query:
        return ""
    shown = []
    for piece in query.split("&"):
        key, sep, value = piece.partition("=")
        key = unquote_plus(key)
        if not sep or not _KEY.fullmatch(key):
            shown.append(_MASK)
        else:
            shown.append(f"{quote(key, safe='')}={_value(key, unquote_plus(value))}")
    return "&".join(shown)


def _value(key: str, value: str) -> str:
    if key == "endpoint":
        return redact_url(value) if "://" in value else _MASK
    if key in _PLAIN_KEYS and _PLAIN_VALUE.fullmatch(value):
        return value
    return _MASK


def _redact_pg(url: str) -> str:
    """A ``postgresql://`` URL split as libpq splits it (:func:`split_userinfo`): the user
    shown, the password masked, the host part shown (no ``@`` is left in it), the query as any
    other."""
    scheme, userinfo, rest = split_userinfo(url)
    shown = f"{scheme}://"
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        shown += f"{user}:{_MASK}@" if colon else f"{user}@"
    where, question, query = rest.partition("?")
    hosts = where.split("/", 1)[0].split(",")
    if any(":" in h.rsplit("]", 1)[-1] and not _PORT.fullmatch(h.rsplit(":", 1)[1]) for h in hosts):
        raise PgUrlError("a host part with a ':' that is not a port (a cut-off user:password)")
    return shown + where + (question + _redact_query(query) if question else "")
