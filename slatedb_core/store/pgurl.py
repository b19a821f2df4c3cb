"""PostgreSQL URLs read the way libpq reads them, so the password we hide is the one it uses.

libpq (``conninfo_uri_parse_options``) ends the userinfo of ``postgresql://user:password@host``
at the FIRST ``@``, provided no ``/`` comes before it, and knows no ``#`` fragment: ``?`` and
``#`` belong to the password. ``urllib.parse.urlsplit`` ends the host at ``/``, ``?`` or ``#``
and splits userinfo at the LAST ``@``; its reading once decided what our messages masked while
libpq decided what was used, and a password holding one of those characters was shown (issue
39, item 3). Here one split decides both: :func:`split_userinfo` for redaction
(:func:`slatedb_core.store.redact.redact_url`) and :func:`pg_params`, libpq's own parser
(``PQconninfoParse`` through psycopg), for connecting, after refusing every URL the two
readings could disagree on: an ``@`` after the userinfo (a password holding ``@`` or ``/``
unencoded; libpq would look up ``rest@host`` in DNS). Percent-encode those (``%40``, ``%2F``).
"""

from __future__ import annotations

SCHEMES = ("postgresql", "postgres")
"""The URI schemes libpq accepts."""


class PgUrlError(ValueError):
    """A PostgreSQL URL libpq would read otherwise than we do, or refuses. Its message never
    holds any part of the URL."""


def is_pg_url(url: str) -> bool:
    return url.partition("://")[0].lower() in SCHEMES and "://" in url


def split_userinfo(url: str) -> tuple[str, str | None, str]:
    """``(scheme, userinfo or None, rest)`` of a ``postgresql://`` URL as libpq splits it: the
    userinfo ends at the first ``@`` unless a ``/`` comes first. An ``@`` left in ``rest`` is
    :class:`PgUrlError` (an unencoded ``@`` or ``/`` in the password, or ``@`` in a host or
    database name): libpq would take part of the password for a host name."""
    scheme, sep, after = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise PgUrlError("not a postgresql:// URL")
    stop = next((i for i, ch in enumerate(after) if ch in "@/"), len(after))
    userinfo: str | None = None
    rest = after
    if stop < len(after) and after[stop] == "@":
        userinfo, rest = after[:stop], after[stop + 1 :]
    if "@" in rest:
        raise PgUrlError(
            "the URL holds an '@' after its user:password@ part; percent-encode '@' and '/' "
            "in a user name or password (%40, %2F)"
        )
    return scheme, userinfo, rest


def pg_params(url: str) -> dict[str, str]:
    """The connection parameters libpq reads from ``url`` (``host``, ``port``, ``dbname``,
    ``user``, ``password`` and query keys), for ``psycopg.connect(**params)``: libpq never sees
    the URL again. :class:`PgUrlError` for a URL :func:`split_userinfo` refuses or libpq cannot
    parse (libpq's message is dropped: it quotes the token it refused, which may be the
    password)."""
    split_userinfo(url)
    from psycopg import Error
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except Error:
        raise PgUrlError(
            "libpq cannot parse it (percent-encode '%', spaces, '@' and '/' in a user name or "
            "password)"
        ) from None
    return {k: str(v) for k, v in params.items() if v is not None}


def secrets_of(params: dict[str, str]) -> set[str]:
    """Every secret value of ``params`` (``password``, ``sslpassword``, any ``*pass*`` /
    ``*secret*`` / ``*token*`` / ``*key*`` key), each also percent-encoded: what a driver's
    message must never show."""
    from urllib.parse import quote

    out: set[str] = set()
    for key, value in params.items():
        k = key.lower()
        if value and any(word in k for word in ("pass", "secret", "token", "key")):
            out.update({value, quote(value, safe=""), quote(value)})
    return out
