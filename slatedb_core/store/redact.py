"""Store URLs as error messages may show them: credentials replaced by ``***``.

A store URL can carry secrets (``s3://bucket?secret_access_key=...``, a two-phase ``txn`` URL
with a PostgreSQL password, ``postgresql://user:password@host/db``), and error messages end up
in logs, Dagster's event log and Spark's driver output. Every message that names a URL the
caller gave names :func:`redact_url` of it.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

# Query keys whose values are not secret (everything else is shown as ***).
_PLAIN_KEYS = frozenset({"endpoint", "region", "allow_http", "virtual_hosted_style"})
_MASK = "***"
_USERINFO = re.compile(r":[^/@]*@")


def redact_url(url: str) -> str:
    """``url`` with its password and every query value but the plain settings masked; a string
    that does not parse as a URL is masked whole after its scheme, anything but a str whole.
    Never raises."""
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    try:
        parts = urlsplit(url)
        if not parts.scheme and "://" in url:  # a scheme urlsplit refuses (my_s3://): its own
            head, rest = url.split("://", 1)
            return head + redact_url("x://" + rest)[1:]
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{_MASK}@{host}" if ":" in userinfo else f"{user}@{host}"
        query = "&".join(
            f"{quote(k, safe='')}={_value(k, v)}"
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        )
        if parts.query and not query:
            query = _MASK
        # no netloc (s3:/user:password@bucket, one slash short): a userinfo-like part masked
        path = parts.path if parts.netloc else _USERINFO.sub(f":{_MASK}@", parts.path)
        return urlunsplit((parts.scheme, netloc, path, query, parts.fragment and _MASK))
    except ValueError:
        head = url.split("://", 1)[0] if "://" in url else ""
        return f"{head}://{_MASK}" if head else _MASK


def _value(key: str, value: str) -> str:
    if key == "endpoint":
        return redact_url(value)
    return value if key in _PLAIN_KEYS else _MASK
