"""Ring items through a real ``evb serve``: ``evb send --nscldaq`` in, ``evb tail --nscldaq``
out, byte-exact; bad files refused naming file and offset, exit 2, with what came before them
acknowledged and on the server; ``evb replay --nscldaq`` equal to the equivalent JSON Lines."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.e2e.conftest import ServerProcess, environment, evb_command, server_factory
from tests.nscldaq import writer

__all__ = ["server_factory"]  # the fixture, imported for these tests


def evb(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        evb_command(*args),
        input=stdin,
        capture_output=True,
        env=environment(),
        timeout=300,
        check=False,
    )


def _two_sources(tmp_path: Path) -> tuple[list[Path], list[bytes]]:
    paths, items = [], []
    for source, stamps in ((1, list(range(0, 3000, 3))), (2, list(range(1, 3000, 5)))):
        data, stamped = writer.run_file(source, stamps, seed=source)
        path = tmp_path / f"run-{source}.evt"
        path.write_bytes(data)
        paths.append(path)
        items += stamped
    return paths, items


def _tail(server: ServerProcess, out: Path, until: int) -> list[tuple[int, int, int, bytes]]:
    done = evb("tail", "--target", server.target, "--nscldaq", str(out), "--until", str(until))
    assert done.returncode == 0, done.stderr.decode()
    return writer.read_fragments(out.read_bytes())


def test_send_tail_round_trip_is_byte_exact(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    # both sources known from the start: the second is sent only once the first was (two
    # processes, seconds apart on a loaded host), and the orderer must wait for it
    server = server_factory(tmp_path / "data", "--sources", "1,2")
    (first, second), items = _two_sources(tmp_path)
    # one file by name, the other on standard input
    sent = evb("send", "--target", server.target, "--nscldaq", str(first))
    assert sent.returncode == 0, sent.stderr.decode()
    piped = evb("send", "--target", server.target, "--nscldaq", "-", stdin=second.read_bytes())
    assert piped.returncode == 0, piped.stderr.decode()
    summary = json.loads(sent.stdout)
    assert summary["fragments"] == summary["items"] - 1 and summary["format_items"] == 1
    fragments = _tail(server, tmp_path / "out.evb", len(items))
    assert len(fragments) == len(items)
    # each fragment's payload is an original ring item, byte for byte, its header the item's
    assert sorted(f[3] for f in fragments) == sorted(items)
    for ts, source, barrier, payload in fragments:
        assert writer.body_header(payload) == (ts, source, barrier)
    # in order: barriers aside, timestamps never go back
    stamps = [f[0] for f in fragments if f[2] == 0]
    assert stamps == sorted(stamps)
    assert [f[2] for f in fragments][-2:] == [writer.END_RUN, writer.END_RUN]


def _acknowledged_before_error(
    tmp_path: Path, server: ServerProcess, data: bytes, good: list[bytes], match: str
) -> None:
    path = tmp_path / "bad.evt"
    path.write_bytes(data)
    done = evb("send", "--target", server.target, "--nscldaq", str(path))
    assert done.returncode == 2, done.stderr.decode()
    message = done.stderr.decode()
    assert f"{path}: byte offset" in message and match in message, message
    # everything before the bad item was acknowledged: it is on the server
    stats = json.loads(evb("stats", "--target", server.target, "--json").stdout)
    assert stats["sources"]["5"]["received"] == len(good), stats["sources"]["5"]


def test_unstamped_item_refused_with_offset_what_came_before_kept(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data")
    good = [writer.item(30, bytes([k % 256]) * 9, 10 * k, 5) for k in range(200)]
    head = writer.ring_format() + b"".join(good)
    data = head + writer.item(writer.PERIODIC_SCALERS, b"s", None) + good[0]
    _acknowledged_before_error(tmp_path, server, data, good, f"byte offset {len(head)}: ring item")
    skipped = evb(
        "send",
        "--target",
        server.target,
        "--skip-unstamped",
        "--nscldaq",
        "-",
        stdin=writer.item(writer.PERIODIC_SCALERS, b"s", None),
    )
    assert skipped.returncode == 0 and json.loads(skipped.stdout)["unstamped_skipped"] == 1


def test_truncated_item_refused_with_offset_what_came_before_kept(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data")
    good = [writer.item(30, bytes([k % 256]) * 9, 10 * k, 5) for k in range(300)]
    head = writer.ring_format() + b"".join(good)
    data = head + writer.item(30, b"cut short", 5000, 5)[:-3]
    _acknowledged_before_error(tmp_path, server, data, good, f"byte offset {len(head)}: truncated")


def test_wrong_format_version_refused(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data")
    path = tmp_path / "v12.evt"
    path.write_bytes(writer.ring_format(12, 0) + writer.item(30, b"a", 1, 5))
    done = evb("send", "--target", server.target, "--nscldaq", str(path))
    assert done.returncode == 2
    assert f"{path}: byte offset 0: RING_FORMAT says NSCLDAQ format 12.0" in done.stderr.decode()


def test_replay_nscldaq_equals_replay_of_the_jsonl(tmp_path: Path) -> None:
    """The same fragments written as JSON Lines by hand (t = 0, payload = the ring item)."""
    paths, _ = _two_sources(tmp_path)
    null_file = tmp_path / "null.evt"
    null_file.write_bytes(
        writer.item(30, b"x", 40, 3) + writer.item(30, b"y", writer.NO_TIMESTAMP, 3)
    )
    lines = []
    for path in [*paths, null_file]:
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            size, item_type = int.from_bytes(data[pos : pos + 4], "little"), data[pos + 4]
            if item_type != writer.RING_FORMAT:
                ts, source, barrier = writer.body_header(data[pos : pos + size])
                ts = 40 if ts == writer.NO_TIMESTAMP else ts  # source 3's previous stamp
                payload = base64.b64encode(data[pos : pos + size]).decode()
                lines.append(
                    json.dumps(
                        {
                            "t": 0.0,
                            "source": source,
                            "ts": ts,
                            "barrier": barrier,
                            "payload": payload,
                        }
                    )
                )
            pos += size
    jsonl = tmp_path / "same.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    files = [str(p) for p in [*paths, null_file]]
    done = evb("replay", "--nscldaq", *files, "--output", str(a))
    assert done.returncode == 0, done.stderr.decode()
    assert evb("replay", str(jsonl), "--output", str(b)).returncode == 0
    assert a.read_text() == b.read_text()
    assert len(a.read_text().splitlines()) == len(lines)


def test_a_mended_file_sent_again_with_resume_lands_each_fragment_once(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """The error names the offset and what was acknowledged; the user mends the file and sends
    it again with --resume: the server keeps what it held and takes the rest, nothing twice.
    Without --resume the same file is new input (sent twice, held twice)."""
    server = server_factory(tmp_path / "data")
    good = [writer.item(30, bytes([k % 256]) * 9, 10 * k, 5) for k in range(300)]
    head = writer.ring_format() + b"".join(good)
    _acknowledged_before_error(
        tmp_path, server, head + writer.item(30, b"cut", 5000, 5)[:-3], good, "truncated"
    )
    mended = tmp_path / "mended.evt"
    more = [writer.item(30, b"after", 5000 + k, 5) for k in range(50)]
    mended.write_bytes(head + b"".join(more))
    done = evb("send", "--target", server.target, "--nscldaq", str(mended), "--resume")
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["acked"] == {"5": 350}
    end = evb("end-run", "--target", server.target)
    assert end.returncode == 0, end.stderr.decode()
    tail = tmp_path / "out.evf"
    assert evb("tail", "--target", server.target, "--nscldaq", str(tail)).returncode == 0
    payloads = [payload for *_, payload in writer.read_fragments(tail.read_bytes())]
    assert payloads == good + more  # each once, in timestamp order
