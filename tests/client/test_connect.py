"""The first connection of every client entry point is bounded (``connect_timeout``) and, when it
cannot be made, raises ``ServiceUnavailable`` naming the address and the cause in the words the
CLI prints (connection refused, name not resolved, TLS handshake failed); a refused bearer token
raises ``AuthenticationError`` naming the address. Real grpc.aio servers on loopback, with
certificates made at test time (tests/certs.py)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orderer import OrdererConfig
from orderer import client as lib
from orderer.apps.tail import tail
from orderer.client import DEFAULT_CONNECT_TIMEOUT, ChannelSecurity
from orderer.errors import AuthenticationError, InterfaceError, ServiceUnavailable
from tests.certs import make_pki
from tests.service.harness import run, serving, target

CONFIG = OrdererConfig(build_window=0.2, startup_delay=0.0, sources=(1,))
TOKEN = "connect-test-token"
QUICK = 0.5
"""connect_timeout of these tests, in seconds."""
SLACK = 3.0
"""Seconds allowed beyond it: the probe that reads gRPC's reason takes at most one; the rest is
for two busy cores."""
LONG = 20.0
"""A connect timeout that a refused handshake must not wait for."""
AT_ONCE = 2.0
"""Seconds a refused handshake may take to be reported (it takes milliseconds)."""
NOBODY = "127.0.0.1:1"
"""Nothing listens there: the connection is refused."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_pki(tmp_path_factory.mktemp("pki"), TOKEN)


# Every entry point, called the same way: (target, security, connect_timeout) -> awaitable.
def _sync(call: Callable[[str, ChannelSecurity | None, float], Any]) -> Callable[..., Any]:
    async def threaded(*args: Any) -> Any:  # the server may share this event loop
        return await asyncio.to_thread(call, *args)

    return threaded


def _send_sync(address: str, security: ChannelSecurity | None, timeout: float) -> None:
    with lib.SourceClient(address, sources=[1], security=security, connect_timeout=timeout) as c:
        c.send_batch(1, np.arange(10, dtype=np.uint64))
        c.wait_acked(timeout=30)


async def _send_async(address: str, security: ChannelSecurity | None, timeout: float) -> None:
    client = lib.AsyncSourceClient(address, sources=[1], security=security, connect_timeout=timeout)
    async with client:
        await client.send_batch(1, np.arange(10, dtype=np.uint64))
        await client.wait_acked(timeout=30)


def _read_sync(address: str, security: ChannelSecurity | None, timeout: float) -> None:
    reader = lib.OrderedStreamReader(
        address, 0, until=1, security=security, connect_timeout=timeout
    )
    for _ in reader:
        pass


async def _read_async(address: str, security: ChannelSecurity | None, timeout: float) -> None:
    async for _ in lib.subscribe(address, 0, until=1, security=security, connect_timeout=timeout):
        pass


def _tail(address: str, security: ChannelSecurity | None, timeout: float) -> None:
    with open("/dev/null", "w") as out:
        tail(address, out, security=security, connect_timeout=timeout)


ENTRY_POINTS: dict[str, Callable[[str, ChannelSecurity | None, float], Awaitable[Any]]] = {
    "SourceClient": _sync(_send_sync),
    "AsyncSourceClient": _send_async,
    "OrderedStreamReader": _sync(_read_sync),
    "subscribe": _read_async,
    "get_stats": _sync(lambda a, s, t: lib.get_stats(a, security=s, connect_timeout=t)),
    "get_stats_async": lambda a, s, t: lib.get_stats_async(a, security=s, connect_timeout=t),
    "configure": _sync(
        lambda a, s, t: lib.configure(a, {"build_window": 1}, security=s, connect_timeout=t)
    ),
    "configure_async": lambda a, s, t: lib.configure_async(
        a, {"build_window": 1}, security=s, connect_timeout=t
    ),
    "end_run": _sync(lambda a, s, t: lib.end_run(a, security=s, connect_timeout=t)),
    "end_run_async": lambda a, s, t: lib.end_run_async(a, security=s, connect_timeout=t),
    "commit": _sync(lambda a, s, t: lib.commit(a, "c", 0, security=s, connect_timeout=t)),
    "commit_async": lambda a, s, t: lib.commit_async(a, "c", 0, security=s, connect_timeout=t),
    "delete_consumer": _sync(
        lambda a, s, t: lib.delete_consumer(a, "c", security=s, connect_timeout=t)
    ),
    "delete_consumer_async": lambda a, s, t: lib.delete_consumer_async(
        a, "c", security=s, connect_timeout=t
    ),
    "remote.tail": _sync(_tail),
}


async def _refusal(
    entry: str, address: str, security: ChannelSecurity | None = None, timeout: float = QUICK
) -> tuple[ServiceUnavailable, float]:
    """The error ``entry`` raises against ``address`` within a connect timeout of ``timeout``,
    and how long it took."""
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable) as caught:
        await ENTRY_POINTS[entry](address, security, timeout)
    return caught.value, time.monotonic() - started


def test_every_entry_point_bounds_its_first_connection_by_default() -> None:
    assert 0 < DEFAULT_CONNECT_TIMEOUT <= 10
    functions = [
        lib.AsyncSourceClient,
        lib.OrderedStreamReader,
        lib.subscribe,
        lib.get_stats,
        lib.get_stats_async,
        lib.configure,
        lib.configure_async,
        lib.end_run,
        lib.end_run_async,
        lib.commit,
        lib.commit_async,
        lib.delete_consumer,
        lib.delete_consumer_async,
        tail,
    ]
    for function in functions:
        parameter = inspect.signature(function).parameters["connect_timeout"]
        assert parameter.default == DEFAULT_CONNECT_TIMEOUT, function
    with pytest.raises(InterfaceError, match="connect_timeout"):
        lib.get_stats(NOBODY, connect_timeout=0)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_nothing_listening_fails_fast_naming_the_address(entry: str) -> None:
    error, seconds = run(_refusal(entry, NOBODY))
    assert str(error).startswith(f"cannot reach {NOBODY} within {QUICK:g} s: connection refused")
    assert "Connection refused" in str(error)  # gRPC's own words are kept at the end
    assert QUICK <= seconds < QUICK + SLACK


def test_an_unresolvable_name_is_named() -> None:
    address = "nosuchhost.invalid:50051"
    for entry in ("get_stats", "SourceClient", "subscribe"):
        error, seconds = run(_refusal(entry, address))
        assert str(error).startswith(
            f"cannot reach {address} within {QUICK:g} s: name not resolved (nosuchhost.invalid)"
        ), entry
        assert seconds < QUICK + SLACK


def test_tls_mismatches_say_so(tmp_path: Path, pki: dict[str, Path]) -> None:
    with_ca = ChannelSecurity.from_files(ca=pki["ca"])
    other_ca = ChannelSecurity.from_files(ca=pki["other_ca"])
    tls = {"tls_cert": pki["server_cert"], "tls_key": pki["server_key"]}

    async def body() -> None:
        async with (
            serving(tmp_path / "plain", CONFIG) as plain,
            serving(tmp_path / "tls", CONFIG, **tls) as secure,
        ):
            cases = [  # (address, security, the words)
                (target(plain), with_ca, "TLS handshake failed (the server does not serve TLS)"),
                (
                    target(secure),
                    other_ca,
                    "TLS handshake failed (certificate verify failed: unable to get local issuer"
                    " certificate; the server's certificate is not signed by the CA this client"
                    " trusts)",
                ),
                (
                    target(secure),
                    None,
                    "the server closed the connection (does it serve TLS? then connect with TLS)",
                ),
            ]
            for address, security, words in cases:
                for entry in ("get_stats_async", "AsyncSourceClient", "subscribe"):
                    # a refused handshake is named long before the connect timeout: LONG, not
                    # QUICK, whose 0.5 s a handshake with a server in this busy process can miss
                    # on a loaded host (it did, once, under make test's three workers)
                    error, seconds = await _refusal(entry, address, security, LONG)
                    prefix = f"cannot connect to {address}: {words}"
                    assert str(error).startswith(prefix), (entry, str(error))
                    assert seconds < QUICK + SLACK
            for running in (plain, secure):
                assert running.service.orderer.counters()["totals"]["received"] == 0

    run(body())



def test_a_refused_handshake_is_named_at_once_whatever_address_grpc_tried_last(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    """``localhost:P`` against servers on 127.0.0.1 alone: gRPC tries ::1 too (nothing listens
    there) and named only that last address's "connection refused", after the whole connect
    timeout, where 127.0.0.1's server had refused the handshake at once."""
    tls = {"tls_cert": pki["server_cert"], "tls_key": pki["server_key"]}
    ca = pki["ca"]
    stranger = ChannelSecurity.from_files(ca=ca, cert=pki["stranger_cert"], key=pki["stranger_key"])
    client = ChannelSecurity.from_files(ca=ca, cert=pki["client_cert"], key=pki["client_key"])

    async def body() -> None:
        async with (
            serving(tmp_path / "plain", CONFIG) as plain,
            serving(tmp_path / "tls", CONFIG, **tls) as secure,
            serving(tmp_path / "mutual", CONFIG, tls_client_ca=ca, **tls) as mutual,
        ):
            cases = [  # (server, security, the words)
                (
                    mutual,
                    stranger,
                    "TLS handshake failed (the server closed the connection; is this client's"
                    " certificate signed by a CA the server trusts?)",
                ),
                (
                    mutual,
                    ChannelSecurity.from_files(ca=ca),
                    "TLS handshake failed (the server closed the connection; does it require a"
                    " client certificate?)",
                ),
                (
                    secure,
                    ChannelSecurity.from_files(ca=pki["other_ca"]),
                    "TLS handshake failed (certificate verify failed: unable to get local issuer"
                    " certificate; the server's certificate is not signed by the CA this client"
                    " trusts)",
                ),
                (
                    secure,
                    None,
                    "the server closed the connection (does it serve TLS? then connect with TLS)",
                ),
                (
                    plain,
                    ChannelSecurity.from_files(ca=ca),
                    "TLS handshake failed (the server does not serve TLS)",
                ),
            ]
            for running, security, words in cases:
                address = f"localhost:{running.port}"
                for entry in ("get_stats", "get_stats_async", "SourceClient", "subscribe"):
                    started = time.monotonic()
                    with pytest.raises(ServiceUnavailable) as caught:
                        await ENTRY_POINTS[entry](address, security, LONG)
                    seconds = time.monotonic() - started
                    message = str(caught.value)
                    assert message.startswith(f"cannot connect to {address}: {words} [gRPC: ")
                    assert seconds < AT_ONCE, (entry, words, seconds)
            for running in (plain, secure, mutual):
                assert running.service.orderer.counters()["totals"]["received"] == 0
            # the right client certificate on the same server and name connects
            stats = await lib.get_stats_async(f"localhost:{mutual.port}", security=client)
            assert stats.next_offset == 0

    run(body())


def test_a_refused_token_is_one_clear_error(tmp_path: Path, pki: dict[str, Path]) -> None:
    settings = {
        "tls_cert": pki["server_cert"],
        "tls_key": pki["server_key"],
        "token_file": pki["token_file"],
    }
    wrong = ChannelSecurity.from_files(ca=pki["ca"], token="not-" + TOKEN)
    missing = ChannelSecurity.from_files(ca=pki["ca"])

    async def body() -> None:
        async with serving(tmp_path, CONFIG, **settings) as running:
            address = target(running)
            for security, words in (
                (wrong, "refused the token (UNAUTHENTICATED: "),
                (missing, "requires a bearer token and this client sent none (UNAUTHENTICATED: "),
            ):
                for entry, call in ENTRY_POINTS.items():
                    # a refusal comes at once; the bound is for a TLS handshake on a loaded host
                    # (0.5 s was not always enough under make test on 2 cores)
                    with pytest.raises(AuthenticationError) as caught:
                        await asyncio.wait_for(call(address, security, 10.0), 30)
                    message = str(caught.value)
                    assert message.startswith(f"the orderer at {address} {words}"), entry
                    assert isinstance(caught.value, ServiceUnavailable)  # the CLI's exit 3
            assert running.service.orderer.counters()["totals"]["received"] == 0
            assert not running.service.stats().run_ended

    run(body())


def test_a_server_starting_within_the_connect_timeout_is_waited_for(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving(tmp_path / "probe", CONFIG) as probe:
            port = probe.port  # free again once this server stopped
        address = f"127.0.0.1:{port}"
        asked = asyncio.create_task(asyncio.to_thread(lib.get_stats, address, connect_timeout=20))
        await asyncio.sleep(1.0)  # refused meanwhile: gRPC keeps trying
        assert not asked.done()
        async with serving(tmp_path / "data", CONFIG, listen=address):
            stats = await asyncio.wait_for(asked, 30)
        assert stats.next_offset == 0

    run(body())


def test_only_the_first_connection_is_bounded(tmp_path: Path) -> None:
    """A source that loses an established connection reconnects for as long as
    ``reconnect_timeout`` allows (here: forever), however short ``connect_timeout`` is."""

    async def body() -> None:
        async with serving(tmp_path, CONFIG) as first:
            address = target(first)
            client = await lib.AsyncSourceClient(
                address, sources=[1], batch_size=10, backoff_max=0.2, connect_timeout=0.2
            ).start()
            await client.send_batch(1, np.arange(10, dtype=np.uint64))
            await client.wait_acked(timeout=30)
        await client.send_batch(1, np.arange(10, 30, dtype=np.uint64))
        await asyncio.sleep(1.0)  # down for five connect timeouts
        async with serving(tmp_path, CONFIG, listen=address):
            await client.end_source(1)
            await client.close(timeout=30)
            assert client.reconnects >= 1 and client.acked(1) == 30
            stats = await lib.get_stats_async(address)
            assert stats.sources[1].ended

    run(body())


def test_a_probe_meeting_an_attempt_under_way_does_not_hide_the_reason_given_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a loaded host the last probe before the connect timeout can meet an attempt still
    under way (DEADLINE_EXCEEDED): the reason an earlier attempt ended with (connection refused)
    is the one to tell, not 'timed out'. gRPC's answers are given in place of a channel: the
    race cannot be provoked on demand (make test met it once in test_unreachable)."""
    import grpc

    from orderer.client import connect

    answers = iter(
        ["failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
         "Failed to connect to remote host: Connection refused"]
        + ["Deadline Exceeded"] * 1000
    )
    monkeypatch.setattr(connect._SyncProbes, "probe", lambda self, timeout: next(answers))
    monkeypatch.setattr(connect._SyncProbes, "final", lambda self, timeout: None)
    channel = grpc.insecure_channel("127.0.0.1:1")
    try:
        with pytest.raises(ServiceUnavailable, match=r"within 0.3 s: connection refused"):
            connect.connect_sync(channel, "127.0.0.1:1", 0.3, None)
    finally:
        channel.close()
