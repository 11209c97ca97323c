"""The client commands of the real ``evb`` CLI against an orderer they cannot use: nothing
listening, a name that does not resolve, TLS on one end only, a CA that did not sign the
server's certificate, a client certificate of another CA or none, a wrong or a missing bearer
token. Each ends with exit status 3 and one line on stderr that names the address and the cause,
and nothing is accepted by the servers: within its connect timeout (plus the start of a Python
process) when nothing answers, at once when the server refused the handshake."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.certs import make_pki
from tests.e2e.conftest import ServerProcess, environment, evb_command

CONNECT_TIMEOUT = 1.0
SLACK = 6.0
"""Seconds beyond the connect timeout: the probe for gRPC's reason (at most 1 s) and a Python
process starting (numpy, grpc) on two cores shared with other tests."""
DEFAULT_CONNECT_TIMEOUT = 5.0
"""What the CLI waits without --connect-timeout (orderer.client.DEFAULT_CONNECT_TIMEOUT)."""
TOKEN = "unreachable-test-token"
NOBODY = "127.0.0.1:1"
NOWHERE = "nosuchhost.invalid:50051"

COMMANDS = {
    "send": ["--n-sources", "1", "--fragments", "10", "--speed", "0"],  # progress on, as typed
    "tail": [],
    "stats": [],
    "end-run": [],
    "top": ["--once"],
    "source": ["dead", "1"],
    "consumers": [],
}
CALLS = ("send", "tail", "stats", "end-run")
"""One command of each kind of call (a client stream, a server stream, a unary call) and one of
the run's control (which asks for the run's orderers first, with its own channel options): the
cause of a refused connection or handshake is named by one function for every command
(:mod:`orderer.wire`), and each of the seven reaches it (the default connect timeout's test runs
them all); the seven again for each of nine causes cost the suite a quarter of a minute of its
two cores."""


@dataclass(frozen=True)
class Servers:
    plain: ServerProcess
    secure: ServerProcess
    """TLS and a bearer token."""
    mutual: ServerProcess
    """Mutual TLS: clients present a certificate of ``ca``."""
    ca: Path
    other_ca: Path
    token_file: Path
    wrong_token_file: Path
    client: tuple[Path, Path]
    """A client certificate of ``ca`` and its key."""
    stranger: tuple[Path, Path]
    """A client certificate of another CA and its key."""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    directory = tmp_path_factory.mktemp("unreachable")
    pki = make_pki(directory, TOKEN)
    wrong = directory / "wrong-token"
    wrong.write_text("not-" + TOKEN + "\n")
    started: list[ServerProcess] = []
    try:
        for name, flags in (
            ("plain", ()),
            (
                "secure",
                (
                    "--tls-cert", str(pki["server_cert"]), "--tls-key", str(pki["server_key"]),
                    "--token-file", str(pki["token_file"]),
                ),
            ),
            (
                "mutual",
                (
                    "--tls-cert", str(pki["server_cert"]), "--tls-key", str(pki["server_key"]),
                    "--tls-client-ca", str(pki["ca"]),
                ),
            ),
        ):
            logs = directory / f"logs-{name}"
            logs.mkdir()
            started.append(ServerProcess(directory / f"data-{name}", logs, *flags).start())
        yield Servers(
            *started,
            pki["ca"],
            pki["other_ca"],
            pki["token_file"],
            wrong,
            (pki["client_cert"], pki["client_key"]),
            (pki["stranger_cert"], pki["stranger_key"]),
        )
    finally:
        for server in started:
            if server.alive():
                server.stop()


def _environment() -> dict[str, str]:
    """The user's EVB_* settings must not decide these cases."""
    return {key: value for key, value in environment().items() if not key.startswith("EVB_")}


def _run_all(
    commands: dict[str, list[str]], timeout: float
) -> dict[str, tuple[int, str, float]]:
    """Run the commands at once; each one's (exit status, stderr, seconds)."""
    started = time.monotonic()
    processes = {
        name: subprocess.Popen(
            evb_command(*args),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=_environment(),
        )
        for name, args in commands.items()
    }
    results: dict[str, tuple[int, str, float]] = {}
    for name, process in processes.items():
        try:
            _, err = process.communicate(timeout=max(0.1, started + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
            pytest.fail(f"evb {name} still ran after {timeout} s; stderr: {err!r}")
        results[name] = (process.returncode, err, time.monotonic() - started)
    return results


def _check(address: str, extra: list[str], words: str, timeout: float, within: str = "") -> None:
    commands = {
        command: [command, "--target", address, *extra, *COMMANDS[command]] for command in CALLS
    }
    for command, (status, err, _seconds) in _run_all(commands, timeout).items():
        lines = err.splitlines()
        assert len(lines) == 1 and "Traceback" not in err, (command, err)
        expected = f"evb {command}: orderer unavailable: {within}{words}"
        assert lines[0].startswith(expected), (command, err)
        assert status == 3, (command, err)


def _connect(address: str) -> str:
    return f"cannot reach {address} within {CONNECT_TIMEOUT:g} s: "


def test_every_command_gives_up_within_the_default_connect_timeout() -> None:
    """Without --connect-timeout: ``evb send`` waited forever before; stats and tail 10 s, then
    printed a bare DEADLINE_EXCEEDED."""
    commands = {name: [name, "--target", NOBODY, *more] for name, more in COMMANDS.items()}
    results = _run_all(commands, DEFAULT_CONNECT_TIMEOUT + SLACK)
    for name, (status, err, seconds) in results.items():
        assert status == 3, (name, err)
        lines = err.splitlines()
        assert len(lines) == 1, (name, err)
        assert lines[0].startswith(
            f"evb {name}: orderer unavailable: cannot reach {NOBODY} within "
            f"{DEFAULT_CONNECT_TIMEOUT:g} s: connection refused [gRPC: "
        ), (name, err)
        assert "Connection refused" in lines[0]  # gRPC's own words, kept at the end
        assert seconds >= DEFAULT_CONNECT_TIMEOUT


@pytest.mark.parametrize(
    ("address", "words"),
    [(NOBODY, "connection refused"), (NOWHERE, "name not resolved (nosuchhost.invalid)")],
    ids=["refused", "unresolved"],
)
def test_no_server_is_named_with_the_cause(address: str, words: str) -> None:
    extra = ["--connect-timeout", str(CONNECT_TIMEOUT)]
    _check(address, extra, words, CONNECT_TIMEOUT + SLACK, within=_connect(address))


LONG_CONNECT_TIMEOUT = 60.0
"""A connect timeout that a refused handshake must not wait for."""
AT_ONCE = 20.0
"""Seconds the ``evb`` processes started at once on two busy cores may take to say that the
handshake was refused (a refusal itself takes milliseconds)."""


def test_tls_on_one_end_only_the_wrong_ca_or_client_certificate(servers: Servers) -> None:
    """Through ``localhost:P`` (gRPC tries ::1, where nothing listens, and 127.0.0.1): each
    refused handshake is named, not the "connection refused" of the last address gRPC tried,
    and at once, not after the whole connect timeout."""
    patient = ["--connect-timeout", str(LONG_CONNECT_TIMEOUT)]
    ca = ["--tls-ca", str(servers.ca)]
    cases = [
        (
            servers.plain,
            ca,
            "TLS handshake failed (the server does not serve TLS)",
        ),
        (
            servers.secure,
            [],
            "the server closed the connection (does it serve TLS? then connect with TLS)",
        ),
        (
            servers.secure,
            ["--tls-ca", str(servers.other_ca)],
            "TLS handshake failed (certificate verify failed",
        ),
        (
            servers.mutual,
            [*ca, "--tls-cert", str(servers.stranger[0]), "--tls-key", str(servers.stranger[1])],
            "TLS handshake failed (the server closed the connection; is this client's"
            " certificate signed by a CA the server trusts?)",
        ),
        (
            servers.mutual,
            ca,
            "TLS handshake failed (the server closed the connection; does it require a client"
            " certificate?)",
        ),
    ]
    for server, extra, words in cases:
        address = f"localhost:{server.port}"
        _check(address, [*patient, *extra], words, AT_ONCE, f"cannot connect to {address}: ")
    mine = [*ca, "--tls-cert", str(servers.client[0]), "--tls-key", str(servers.client[1])]
    done = subprocess.run(
        evb_command("stats", "--json", "--target", f"localhost:{servers.mutual.port}", *mine),
        capture_output=True, text=True, env=_environment(), timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr


def test_a_wrong_or_missing_token(servers: Servers) -> None:
    secure = servers.secure.target
    with_ca = ["--tls-ca", str(servers.ca)]
    wrong = [*with_ca, "--token-file", str(servers.wrong_token_file)]
    # connects at once: no connect timeout to wait for
    _check(secure, wrong, f"the orderer at {secure} refused the token (UNAUTHENTICATED: ", SLACK)
    _check(
        secure,
        with_ca,
        f"the orderer at {secure} requires a bearer token and this client sent none "
        "(UNAUTHENTICATED: ",
        SLACK,
    )
    for server in (servers.plain, servers.secure):  # nothing was accepted, no run ended
        assert server.alive()
    right = [*with_ca, "--token-file", str(servers.token_file)]
    done = subprocess.run(
        evb_command("stats", "--json", "--target", secure, *right),
        capture_output=True, text=True, env=_environment(), timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["totals"]["received"] == 0 and not stats["run_ended"]
    top = subprocess.run(  # the live view over TLS with the token, one frame
        evb_command("top", "--once", "--target", secure, *right),
        capture_output=True, text=True, env=_environment(), timeout=60, check=False,
    )
    assert top.returncode == 0, top.stderr
    assert f"evb top  {secure}" in top.stdout and "running" in top.stdout

