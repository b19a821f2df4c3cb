"""No Compose command, entrypoint or healthcheck expands a secret variable into a process's argv
(where ``ps`` and /proc show it to every user)."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml  # type: ignore[import-untyped]

from lakehouse_demo.cluster.settings import INFRA

# ---- deployment: no credential on a command line ---------------------------------------------
_SECRET_VAR = re.compile(r"\$\$?\{?([A-Z0-9_]*(?:PASSWORD|SECRET|TOKEN)[A-Z0-9_]*)")


# builtins of every POSIX sh (bash, dash, busybox ash): their arguments start no process, so they
# are on no command line; `printf ... | mc` hands a secret to mc on its stdin
_NO_PROCESS = frozenset({"printf", "echo", "export", "read", ":"})


_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


_SHELLS = frozenset({"sh", "/bin/sh", "bash", "/bin/bash", "ash", "/bin/ash", "dash"})


def _shell_argv_secrets(script: str) -> list[str]:
    """The secret variables ``script`` expands into a new process's argv: a word of a simple
    command that is not a no-process builtin (assignments before the command name go to its
    environment, not its argv)."""
    lexer = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    found: list[str] = []
    command: list[str] = []
    for word in [*lexer, ";"]:
        if word and set(word) <= set(";&|()<>"):  # an operator ends a simple command
            while command and _ASSIGNMENT.match(command[0]):
                command.pop(0)
            if command and command[0] not in _NO_PROCESS:
                found += [v for w in command for v in _SECRET_VAR.findall(w)]
            command = []
        else:
            command.append(word)
    return found


def _argv_secrets(value: str | list[str] | None, shell_entrypoint: bool) -> list[str]:
    """The secret variables a Compose ``command``/``entrypoint``/healthcheck expands into argv:
    an exec-form argument is argv itself; a shell script is parsed (``sh -c SCRIPT``,
    ``CMD-SHELL``, or a command under an ``["/bin/sh", "-c"]`` entrypoint)."""
    if value is None:
        return []
    args = [value] if isinstance(value, str) else list(value)
    if isinstance(value, str) or shell_entrypoint:
        return [v for script in args for v in _shell_argv_secrets(script)]
    if args[:1] == ["CMD-SHELL"]:
        return [v for script in args[1:] for v in _shell_argv_secrets(script)]
    if len(args) >= 3 and args[0] in _SHELLS and args[1] == "-c":
        return [v for a in args[:2] for v in _SECRET_VAR.findall(a)] + [
            v for script in args[2:] for v in _shell_argv_secrets(script)
        ]
    return [v for a in args for v in _SECRET_VAR.findall(a)]


def test_no_compose_command_expands_a_secret_into_argv() -> None:
    """A Compose service's command, entrypoint or healthcheck that expands a secret variable as
    a process's argument puts the secret on a command line, which every local user of the Docker
    host reads in ps (SECURITY.md: "No secret appears on a command line"). Review of issue 39:
    create-bucket ran `mc alias set lake URL "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD"`; it now
    pipes the keys to mc's stdin with the printf builtin.

    Found by the review of issue 39's fixes (was review/test_issue39_review.py)."""
    compose = yaml.safe_load((INFRA / "docker-compose.yml").read_text())
    found = []
    for name, svc in compose["services"].items():
        entry = svc.get("entrypoint")
        shell_entry = isinstance(entry, list) and entry[:1] != [] and entry[0] in _SHELLS
        found += [f"{name}.entrypoint: ${v}" for v in _argv_secrets(entry, False)]
        found += [f"{name}.command: ${v}" for v in _argv_secrets(svc.get("command"), shell_entry)]
        test = (svc.get("healthcheck") or {}).get("test")
        found += [f"{name}.healthcheck: ${v}" for v in _argv_secrets(test, False)]
    assert not found, found


@pytest.mark.parametrize(
    ("value", "shell_entrypoint", "leaks"),
    [
        # the form the review found (create-bucket before the fix)
        (['mc alias set lake http://minio:9000 "$$U" "$$MINIO_ROOT_PASSWORD" && mc mb x'], True, 1),
        (["mc", "alias", "set", "lake", "http://m", "u", "${MINIO_ROOT_PASSWORD}"], False, 1),
        (["sh", "-c", "echo ok; psql -W $$PGPASSWORD"], False, 1),
        (["CMD-SHELL", "curl -u x:$${API_TOKEN} http://h"], False, 1),
        ("mc mb x && X=1 tool --key=$$AWS_SECRET_ACCESS_KEY", False, 1),
        ("FOO=1 export A=$$SPARK_SECRET || (run $$SPARK_SECRET)", False, 1),
        # no process gets it in argv
        (['printf \'%s\\n%s\\n\' "$$U" "$$MINIO_ROOT_PASSWORD" | mc alias set lake h'], True, 0),
        ("MC_SECRET=$$DB_PASSWORD mc mb x; export T=$$TOKEN_X", False, 0),
        (["CMD-SHELL", "pg_isready -U $${POSTGRES_USER}"], False, 0),
    ],
)
def test_the_argv_check_tells_argv_from_stdin_and_environment(
    value: str | list[str], shell_entrypoint: bool, leaks: int
) -> None:
    """The check above finds the form the review reported and the usual variants, and lets a
    builtin's arguments or an assignment (environment) through.

    Found by the review of issue 39's fixes (was review/test_issue39_review.py)."""
    assert len(_argv_secrets(value, shell_entrypoint)) == leaks
