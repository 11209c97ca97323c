"""``evb`` as a user meets it before any server is involved: ``--version``, every default in
``--help``, and the mistakes users make (a negative count, a broken or misspelt ``--config``)
each refused with exit status 2 and one line naming the flag, or the file, line and key.
(The commands that talk to a server are tried in ``tests/e2e/test_cli.py``.)"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
from pathlib import Path

import pytest

from orderer.cli import build_parser, main, serve_configs
from orderer.config import OrdererConfig

NOWHERE = ["--target", "127.0.0.1:1"]  # never reached: the flags are refused first


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"evb {importlib.metadata.version('evb')}\n"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["tail", *NOWHERE, "--from", "-1"], "--from"),
        (["tail", *NOWHERE, "--until", "-5"], "--until"),
        (["send", *NOWHERE, "--rate", "-1"], "--rate"),
        (["send", *NOWHERE, "--rate", "0"], "--rate"),
        (["send", *NOWHERE, "--rate", "nan"], "--rate"),
        (["send", *NOWHERE, "--n-sources", "0"], "--n-sources"),
        (["send", *NOWHERE, "--fragments", "-1"], "--fragments"),
        (["send", *NOWHERE, "--batch-size", "0"], "--batch-size"),
        (["send", *NOWHERE, "--client-batch", "0"], "--client-batch"),
        (["send", *NOWHERE, "--linger", "-1"], "--linger"),
        (["send", *NOWHERE, "--speed", "-1"], "--speed"),
        (["send", *NOWHERE, "--seed", "-1"], "--seed"),
        (["send", *NOWHERE, "--payload-size", "-1"], "--payload-size"),
        (["send", *NOWHERE, "--first-source", "-1"], "--first-source"),
        (["send", *NOWHERE, "--first-source", str(2**32)], "--first-source"),
        (["send", *NOWHERE, "--sync-barriers", "-1"], "--sync-barriers"),
        (["send", *NOWHERE, "--connect-timeout", "0"], "--connect-timeout"),
        (["tail", *NOWHERE, "--connect-timeout", "-1"], "--connect-timeout"),
        (["stats", *NOWHERE, "--connect-timeout", "inf"], "--connect-timeout"),
        (["stats", *NOWHERE, "--timeout", "-1"], "--timeout"),
        (["stats", *NOWHERE, "--barriers", "0"], "--barriers"),
        (["top", *NOWHERE, "--interval", "0"], "--interval"),
        (["top", *NOWHERE, "--barriers", "-1"], "--barriers"),
        (["source", "dead", "1", *NOWHERE, "--timeout", "0"], "--timeout"),
        (["end-run", *NOWHERE, "--connect-timeout", "0"], "--connect-timeout"),
        (["end-run", *NOWHERE, "--timeout", "0"], "--timeout"),
        (["serve", "--stop-grace", "-1"], "--stop-grace"),
        (["serve", "--retention-bytes", "-1"], "--retention-bytes"),
        (["serve", "--retention-seconds", "0"], "--retention-seconds"),
        (["serve", "--max-payload-bytes", "0"], "--max-payload-bytes"),
        (["serve", "--metrics-port", "70000"], "--metrics-port"),
        (["serve", "--build-window", "-1"], "--build-window"),
        (["serve", "--source-timeout", "-1"], "--source-timeout"),
        (["demo", "--seconds", "0"], "--seconds"),
    ],
)
def test_a_nonsensical_number_is_refused_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(rf"(argument )?{flag}: must be ", err), err
    assert "Traceback" not in err


@pytest.mark.parametrize("value", ["-1", "abc", "1.5", str(2**32), ""])
def test_a_bad_source_id_is_refused_naming_the_value(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``evb source dead|revive SOURCE`` checks the id before it connects (the target is
    never reached)."""
    assert main(["source", "dead", value, *NOWHERE]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"evb source: SOURCE: must be a source id, an integer from 0 to 4294967295 "
        f"(got {value!r})\n"
    ), err
    assert main(["source", "kill", "1", *NOWHERE]) == 2
    assert "argument action: invalid choice: 'kill'" in capsys.readouterr().err


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "evb.yaml"
    path.write_text(text)
    return path


def _serve_error(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    """What ``evb serve --config PATH`` prints, refused before anything starts."""
    assert main(["serve", "--config", str(path), "--data-dir", str(path.parent), *flags]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_broken_yaml_names_the_file_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "buildWindow: 5\nsources: [1, 2\nlatePolicy: drop\n")
    err = _serve_error(path, capsys)
    assert err.startswith(f"evb serve: {path}:3:11: not valid YAML: expected ',' or ']'"), err
    path = _write(tmp_path, "buildWindow: 5\n\tstartupDelay: 1\n")
    assert f"{path}:2:1: not valid YAML" in _serve_error(path, capsys)


def test_an_unknown_key_suggests_the_nearest_and_lists_the_resource_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "buildWindow: 5\nbarierTimeout: 30\n")
    err = _serve_error(path, capsys)
    assert f"{path}:2: barierTimeout: unknown key; did you mean barrierTimeout?" in err
    assert "buildWindow, startupDelay" in err and "maxPayloadBytes" in err  # camelCase, all
    path = _write(tmp_path, "maxPayloadByte: 4096\n")  # a service setting is suggested too
    assert "did you mean maxPayloadBytes?" in _serve_error(path, capsys)
    path = _write(tmp_path, "flowControl:\n  queueXoff: 10\n  queueXof: 5\n")
    assert f"{path}:3: flowControl.queueXof: unknown key; did you mean flowControl.queueXoff?" in (
        _serve_error(path, capsys)
    )


def test_a_bad_value_names_the_line_or_the_flag_it_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "startupDelay: 0\nbuild_window: -5\nstopGrace: -1\n")
    assert f"{path}:2: build_window: must be > 0" in _serve_error(path, capsys)
    path = _write(tmp_path, "stopGrace: -1\n")
    assert f"{path}:1: stopGrace: must be >= 0" in _serve_error(path, capsys)
    path = _write(tmp_path, "flowControl:\n  queueXoff: 10\n  queueXon: 20\n")
    assert f"{path}:3: flowControl.queueXon: must be <= " in _serve_error(path, capsys)
    path = _write(tmp_path, "sources: [1, 2]\n")
    assert "--sources: " in _serve_error(path, capsys, "--sources", "3,3")
    path = _write(tmp_path, "buildWindow: 5\nbuild_window: 6\n")
    assert f"{path}:2: build_window: given twice (first at {path}:1)" in (
        _serve_error(path, capsys)
    )
    path = _write(tmp_path, "- a\n- list\n")
    assert "must hold a mapping" in _serve_error(path, capsys)
    assert "--config" in _serve_error(tmp_path / "missing.yaml", capsys)


def test_a_flag_wins_over_the_file_whatever_its_spelling(tmp_path: Path) -> None:
    path = _write(tmp_path, "build_window: -5\nstopGrace: 3\n")
    args = build_parser().parse_args(["serve", "--config", str(path), "--build-window", "2"])
    config, service = serve_configs(args)
    assert config.build_window == 2 and service.stop_grace == 3


@pytest.mark.parametrize(
    ("text", "flags"),
    [
        ("sourceTimeout: 0\n", []),
        ("source_timeout: 0\n", []),
        ("sourceTimeout: off\n", []),  # YAML 1.1 reads it as false
        ("sourceTimeout: 30\n", ["--source-timeout", "0"]),
        ("", ["--source-timeout", "off"]),
    ],
)
def test_source_timeout_zero_means_off_in_the_file_and_on_the_command_line(
    tmp_path: Path, text: str, flags: list[str]
) -> None:
    args = build_parser().parse_args(["serve", "--config", str(_write(tmp_path, text)), *flags])
    config, _ = serve_configs(args)
    assert config.source_timeout is None


def _option_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's help as printed by ``--help`` (its lines joined), by its first flag."""
    out: dict[str, str] = {}
    current = None
    for line in parser.format_help().splitlines():
        match = re.match(r"  (-[-\w]+)", line)
        if match:
            current = match.group(1)
            out[current] = line
        elif current is not None and line.startswith("    "):
            out[current] += " " + line.strip()
        else:
            current = None
    return out


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: sub for name, sub in commands.choices.items() if name != "spark-job"}


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_help_shows_every_default(command: str) -> None:
    parser = _subcommands()[command]
    helps = _option_help(parser)
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        if action.default is None or action.default is False:
            continue  # nothing to show: an optional input, an on/off switch
        text = helps[action.option_strings[0]]
        shown = str(action.default)
        assert f"(default: {shown})" in text or "(default: $" in text, (command, text)


def test_serve_shows_the_service_defaults_and_where_else_they_come_from() -> None:
    from orderer.service.settings import ServiceConfig

    service = ServiceConfig()
    config = OrdererConfig()
    helps = _option_help(_subcommands()["serve"])
    expected = {
        "--listen": ("listen", service.listen),
        "--data-dir": ("dataDir", str(service.data_dir)),
        "--fsync": ("fsync", service.fsync.value),
        "--max-payload-bytes": ("maxPayloadBytes", str(service.max_payload_bytes)),
        "--stop-grace": ("stopGrace", f"{service.stop_grace:g}"),
        "--strict-sources": ("strictSources", "yes" if service.strict_sources else "no"),
        "--metrics-port": ("metricsPort", "none"),
        "--retention-bytes": ("retentionBytes", "all"),
        "--retention-seconds": ("retentionSeconds", "all"),
        "--build-window": ("buildWindow", f"{config.build_window:g}"),
        "--startup-delay": ("startupDelay", f"{config.startup_delay:g}"),
        "--source-timeout": ("sourceTimeout", f"{config.source_timeout:g}"),
        "--late-policy": ("latePolicy", config.late_policy),
    }
    assert service.metrics_port is None and service.retention_bytes is None
    for flag, (key, default) in expected.items():
        assert f"(default: {default}, or {key} in --config)" in helps[flag], helps[flag]


def test_the_connect_timeout_default_is_the_client_librarys() -> None:
    from orderer.cli import DEFAULT_CONNECT_TIMEOUT
    from orderer.client import DEFAULT_CONNECT_TIMEOUT as LIBRARY

    assert DEFAULT_CONNECT_TIMEOUT == LIBRARY


def test_the_command_starts_without_loading_grpc() -> None:
    """Every evb command parses its flags first; gRPC (~50 ms to import) loads only when a
    command connects, so `evb replay` and `--help` never pay for it."""
    import subprocess
    import sys

    code = "import sys, orderer.cli; sys.exit('grpc' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_missing_value_is_named_without_a_meaningless_got_none(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from orderer.cli import main

    assert main(["consumers", "delete", "--target", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err == "evb consumers: NAME: evb consumers delete needs the consumer's name\n"


def test_output_piped_into_a_reader_that_stops_early_ends_quietly(tmp_path: Path) -> None:
    """``evb replay RUN --output /dev/stdout | head -1``: the reader leaving is a normal end
    (status 141, as a shell reports SIGPIPE), not a BrokenPipeError traceback."""
    import subprocess
    import sys

    run = tmp_path / "run.jsonl"
    run.write_text(
        "".join(f'{{"t": {i * 1e-4}, "source": {i % 2}, "ts": {i}}}\n' for i in range(20000))
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "orderer.cli", "replay", str(run), "--output", "/dev/stdout"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith(b"{")
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


@pytest.mark.parametrize(
    ("interrupt", "status"), [("Terminated", 128 + 15), ("KeyboardInterrupt", 130), (None, None)]
)
def test_an_interrupt_that_lands_inside_a_lock_wait_ends_as_the_interrupt(
    monkeypatch: pytest.MonkeyPatch, interrupt: str | None, status: int | None
) -> None:
    """SIGTERM (or Ctrl-C) raised while ``threading.Condition.wait`` had released its lock
    (``evb tail --follow`` in a blocking gRPC read) surfaces as a RuntimeError ("cannot release
    un-acquired lock") with the interrupt as its context: still the interrupt's exit status, no
    traceback; any other RuntimeError is not hidden."""
    import orderer.cli as cli
    from orderer.cli.signals import Terminated

    raised = {"Terminated": Terminated, "KeyboardInterrupt": KeyboardInterrupt}

    def handler(args: argparse.Namespace) -> int:
        try:
            if interrupt is not None:
                raise raised[interrupt]
            raise ValueError("unrelated")
        except (KeyboardInterrupt, ValueError):
            raise RuntimeError("cannot release un-acquired lock") from None

    parser = argparse.ArgumentParser()
    parser.set_defaults(handler=handler, command="tail")
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    if status is None:
        with pytest.raises(RuntimeError):
            cli.main([])
    else:
        assert cli.main([]) == status
