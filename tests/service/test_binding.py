"""The service's addresses (orderer/service/binding.py, and its use in ``start_server``): an
address another server holds is refused, whichever spelling names it, and a start refused at
any step leaves nothing held (ports, the data directory's lock) and nothing written."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orderer.config import OrdererConfig
from orderer.errors import ConfigError
from orderer.service import binding
from orderer.service.server import start_server
from orderer.service.settings import ServiceConfig
from tests.service.harness import run, serving


@pytest.fixture
def held() -> Iterator[int]:
    """A port another server listens on, at 127.0.0.1."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize("spelling", ["127.0.0.1:{}", "localhost:{}", "[::]:{}", "0.0.0.0:{}"])
def test_every_spelling_of_a_held_port_is_refused(held: int, spelling: str) -> None:
    """``localhost`` too: gRPC would bind its ::1 alone and succeed, and the clients that
    resolve it to 127.0.0.1 would reach the other server."""
    listen = spelling.format(held)
    with pytest.raises(ConfigError, match=r"^--listen: address already in use \(another evb"):
        binding.check_listen(listen)


def test_a_served_unix_socket_is_refused(tmp_path: Path) -> None:
    """gRPC would unlink the other server's socket and take its clients from then on."""
    path = tmp_path / "evb.sock"
    with socket.socket(socket.AF_UNIX) as holder:
        holder.bind(str(path))
        holder.listen()
        with pytest.raises(ConfigError, match="a server listens on this socket already"):
            binding.check_listen(f"unix:{path}")
    assert binding.check_listen(f"unix:{tmp_path / 'free.sock'}") == []


def test_the_metrics_port_cannot_be_the_grpc_port() -> None:
    with pytest.raises(ConfigError, match=r"^--metrics-port: is the port of --listen \[::\]:9"):
        binding.check_metrics(9090, "0.0.0.0", "[::]:9090")
    binding.check_metrics(0, "0.0.0.0", "[::]:0")


def _skip_first(check: Callable[..., Any]) -> Callable[..., Any]:
    """``check`` passing once without looking: the port is taken right after it."""
    calls = []

    def checked(*args: Any) -> Any:
        calls.append(args)
        return [] if len(calls) == 1 else check(*args)

    return checked


def test_a_port_taken_after_the_check_is_refused_and_the_start_undone(
    held: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real bind fails (another process took the port after the check): the error still
    says why, and the data directory opened meanwhile is closed and unlocked."""

    async def body() -> None:
        with monkeypatch.context() as patch:
            patch.setattr(binding, "check_listen", _skip_first(binding.check_listen))
            with pytest.raises(ConfigError, match=r"^--listen: address already in use"):
                await start_server(
                    OrdererConfig(), ServiceConfig(data_dir=tmp_path, listen=f"127.0.0.1:{held}")
                )
        async with serving(tmp_path):  # the lock was released
            pass

    run(body())


def test_a_metrics_port_taken_after_the_check_is_refused_and_the_start_undone(
    held: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        with monkeypatch.context() as patch:
            patch.setattr(binding, "check_metrics", _skip_first(binding.check_metrics))
            with pytest.raises(ConfigError, match=f"^--metrics-port: 127.0.0.1:{held}: address"):
                await start_server(
                    OrdererConfig(),
                    ServiceConfig(
                        data_dir=tmp_path,
                        listen="127.0.0.1:0",
                        metrics_port=held,
                        metrics_address="127.0.0.1",
                    ),
                )
        async with serving(tmp_path):
            pass

    run(body())


def test_a_refused_start_writes_nothing(held: int, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    async def body() -> None:
        for settings in (
            {"listen": f"127.0.0.1:{held}"},
            {"listen": "127.0.0.1:0", "metrics_port": held, "metrics_address": "127.0.0.1"},
        ):
            with pytest.raises(ConfigError, match="address already in use"):
                await start_server(OrdererConfig(), ServiceConfig(data_dir=data_dir, **settings))
            assert not data_dir.exists()

    run(body())
