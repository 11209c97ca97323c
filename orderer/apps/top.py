"""``evb top``: the live view of a running orderer, redrawn every second until Ctrl-C or q.

Why: the questions of a shift crew in the middle of the night (why is the builder stalled,
which source is behind, is the analysis keeping up, which barrier went wrong) need an answer
that moves; ``evb stats`` is one photograph. Each refresh is one ``GetStats`` call asking for
only the barriers it shows; the frame is drawn by :mod:`orderer.apps.console`, the rates (fragments
per second in and out) come from two successive statistics on the orderer's clock.

A server that stops answering does not end the view: the header says so and the view keeps
asking, showing the last statistics it had (a restarting orderer comes back by itself). A
refused token does end it (exit 3): asking again will not change the answer. On a terminal the
view takes the alternate screen and redraws in place; into a pipe or a file (``evb top | cat``)
each frame is printed after the previous one, plain; ``once`` prints one frame and returns,
which is what scripts and tests use.

A run over several orderers (``--target a,b,c``, or one orderer started with ``--peers``, whose
answer names the others) is shown as the run's line and each orderer's, with their rates
(:mod:`orderer.apps.run_stats`); an orderer that does not answer is marked on its line and
asked again, the others shown meanwhile.
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Iterator
from typing import IO, Any

from rich.console import Group
from rich.text import Text

from orderer.apps.console import DEFAULT_RECENT, top_frame, write
from orderer.apps.run_stats import (
    OrdererView,
    check_roles,
    orderer_targets,
    run_table,
    split_targets,
)
from orderer.client import DEFAULT_CONNECT_TIMEOUT, ChannelSecurity, get_stats
from orderer.errors import AuthenticationError, ServiceUnavailable
from orderer.stats import Stats

__all__ = ["run_top"]


class _View:
    """What the next frame shows: the last statistics received, the rates between the last two,
    and why the last call failed (None when it did not)."""

    def __init__(self, target: str, recent: int) -> None:
        self.target = target
        self.recent = recent
        self.stats: Stats | None = None
        self.rates: tuple[float, float] | None = None
        self.error: str | None = None

    def update(self, stats: Stats | None, error: str | None = None) -> None:
        self.error = error
        if stats is None:
            return
        self.rates = _rates(self.stats, stats)
        self.stats = stats

    def frame(self, width: int, plain: bool) -> Any:
        return top_frame(
            self.stats,
            target=self.target,
            error=self.error,
            rates=self.rates,
            plain=plain,
            width=width,
            recent=self.recent,
        )


class _RunView:
    """What the next frame of a run over several orderers shows: each orderer's last answer,
    its rates and why its last call failed."""

    def __init__(self, targets: list[str]) -> None:
        self.targets = targets
        self.views = [OrdererView(k, t, None) for k, t in enumerate(targets)]

    def update(self, index: int, stats: Stats | None, error: str | None = None) -> None:
        view = self.views[index]
        if stats is None:
            self.views[index] = OrdererView(index, view.target, view.stats, error, view.rates)
            return
        rates = _rates(view.stats, stats)
        self.views[index] = OrdererView(index, view.target, stats, None, rates)
        check_roles(self.views)

    def frame(self, width: int, plain: bool) -> Any:
        style = "" if plain else "bold"
        header = Text(
            f"evb top  {','.join(self.targets)}  {time.strftime('%H:%M:%S')}", style=style
        )
        return Group(header, run_table(self.views, plain=plain, width=width, rates=True))


def _rates(before: Stats | None, after: Stats) -> tuple[float, float] | None:
    """Fragments per second received and emitted between two statistics (None without two, or
    across a restart, where the orderer's clock or counters went back)."""
    if before is None:
        return None
    seconds = float(after.now) - float(before.now)
    received = after.totals.received - before.totals.received
    emitted = after.next_offset - before.next_offset
    if seconds <= 0 or received < 0 or emitted < 0:
        return None
    return received / seconds, emitted / seconds


@contextlib.contextmanager
def _keys(stdin: IO[str] | None) -> Iterator[Any]:
    """A function waiting up to its argument in seconds that returns True once q is pressed;
    the terminal is in cbreak mode meanwhile (keys arrive one by one, Ctrl-C still stops) and
    restored after. Without a terminal on ``stdin`` it only waits."""
    if stdin is None or not stdin.isatty():

        def sleep(seconds: float) -> bool:
            time.sleep(seconds)
            return False

        yield sleep
        return
    import termios
    import tty

    fd = stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def wait(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if select.select([fd], [], [], left)[0] and stdin.read(1) in ("q", "Q"):
                return True
        return False

    try:
        yield wait
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def run_top(
    target: str,
    out: IO[str],
    *,
    interval: float = 1.0,
    once: bool = False,
    recent: int = DEFAULT_RECENT,
    stdin: IO[str] | None = None,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> int:
    """``evb top``: the live view on ``out`` every ``interval`` seconds until Ctrl-C or q on
    ``stdin`` (exit status 0); ``once``: one frame, and an unreachable server raises
    ``ServiceUnavailable`` as ``evb stats`` does."""
    targets = split_targets(target)
    view: _View | _RunView = _View(target, recent) if len(targets) == 1 else _RunView(targets)

    def ask(address: str) -> Stats | str:
        """The answer, or why there is none (``once``: raised, as ``evb stats`` does)."""
        try:
            return get_stats(
                address,
                barrier_log_limit=recent or 1,
                timeout=timeout,
                security=security,
                connect_timeout=connect_timeout,
            )
        except AuthenticationError:
            raise
        except ServiceUnavailable as error:
            if once:
                raise
            return str(error)

    def poll() -> None:
        nonlocal view
        if isinstance(view, _RunView):
            for k, address in enumerate(view.targets):
                answer = ask(address)
                if isinstance(answer, str):
                    view.update(k, None, answer)
                else:
                    view.update(k, answer)
            return
        answer = ask(target)
        if isinstance(answer, str):
            view.update(None, answer)
            return
        named = orderer_targets(answer) if view.stats is None else None
        if named is None:
            view.update(answer)
            return
        view = _RunView(named)  # one orderer of a run over several: show them all
        poll()

    if once:
        poll()
        write(out, view.frame)
        return 0
    try:
        with _keys(stdin) as wait:
            if out.isatty():
                _live(out, lambda: view, poll, wait, interval)
            else:
                while True:
                    started = time.monotonic()
                    poll()
                    write(out, view.frame)
                    out.write("\n")
                    if wait(max(0.0, started + interval - time.monotonic())):
                        break
    except KeyboardInterrupt:
        pass
    return 0


def _live(out: IO[str], view: Any, poll: Any, wait: Any, interval: float) -> None:
    """Redraw in place on the terminal's alternate screen (left as it was on exit); ``view()``
    is the view now (a run's replaces one orderer's once its answer names the others)."""
    from rich.console import Console
    from rich.live import Live

    console = Console(file=out, highlight=False, markup=False, emoji=False)
    with Live(console=console, screen=True, auto_refresh=False, redirect_stderr=False) as live:
        live.update(view().frame(console.width, False), refresh=True)  # "connecting"
        while True:
            started = time.monotonic()
            poll()
            live.update(view().frame(console.width, False), refresh=True)
            if wait(max(0.0, started + interval - time.monotonic())):
                return
