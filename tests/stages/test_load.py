"""A user's module of stages (``evb spark-job --stages FILE.py``): its stages in definition
order or its ``STAGES`` list, and every way a file can be wrong named with the file."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orderer.errors import ConfigError
from orderer.stages import Order
from orderer.stages.load import load_stages, module_name

Write = Callable[[str, str], Path]

HEADER = """\
import pyarrow as pa
from orderer.stages import order_insensitive, order_sensitive, sequencer
"""


def with_header(body: str) -> str:
    """A module's source: the imports a stages module needs, then ``body`` (dedented)."""
    return HEADER + textwrap.dedent(body)


@pytest.fixture
def write(tmp_path: Path) -> Iterator[Write]:
    """Writes a file into ``tmp_path``; what loading it put in ``sys.modules`` goes after."""
    stems: list[str] = []

    def write(filename: str, source: str) -> Path:
        path = tmp_path / filename
        path.write_text(source)
        stems.append(path.stem)
        return path

    yield write
    for stem in stems:
        sys.modules.pop(stem, None)


def test_stages_come_in_definition_order(write: Write) -> None:
    path = write(
        "lab_stages.py",
        with_header("""
        SCHEMA = [("event", pa.int64())]

        @order_insensitive(schema=SCHEMA)
        def zeta(table):
            return table

        def helper():  # not a stage
            return 1

        @order_sensitive(schema=SCHEMA, reads="zeta", key="event")
        def alpha(table, state):
            return table, state

        @sequencer(schema=SCHEMA, order_by=["event"], name="middle")
        def sort(table):
            return table.sort_by("event")
        """),
    )
    stages = load_stages(str(path))
    assert [stage.name for stage in stages] == ["zeta", "alpha", "middle"]
    assert [stage.order for stage in stages] == [
        Order.INSENSITIVE,
        Order.SENSITIVE,
        Order.SEQUENCER,
    ]
    # imported under its file's stem, which is how its functions pickle and executors find it
    assert module_name(path) == "lab_stages"
    assert stages[0].function.__module__ == "lab_stages"
    assert sys.modules["lab_stages"].zeta is stages[0]


def test_a_stages_list_wins(write: Write) -> None:
    path = write(
        "listed.py",
        with_header("""
        SCHEMA = [("event", pa.int64())]

        @order_insensitive(schema=SCHEMA)
        def a(table):
            return table

        @order_insensitive(schema=SCHEMA)
        def b(table):
            return table

        @order_insensitive(schema=SCHEMA)
        def c(table):
            return table

        STAGES = (c, a)
        """),
    )
    assert [stage.name for stage in load_stages(path)] == ["c", "a"]


def test_a_file_that_is_not_python_is_refused(write: Write) -> None:
    path = write("stages.txt", "")
    with pytest.raises(ConfigError, match=r"--stages: must be a Python file") as error:
        load_stages(path)
    assert error.value.value == str(path)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "absent.py"
    with pytest.raises(ConfigError, match="--stages: no such file") as error:
        load_stages(path)
    assert error.value.value == str(path)


def test_a_directory_is_no_file(tmp_path: Path) -> None:
    (tmp_path / "folder.py").mkdir()
    with pytest.raises(ConfigError, match="no such file"):
        load_stages(tmp_path / "folder.py")


@pytest.mark.parametrize("filename", ["my-stages.py", "2024.py", "lab stages.py"])
def test_a_file_name_that_is_no_identifier_is_refused(write: Write, filename: str) -> None:
    path = write(filename, HEADER)
    with pytest.raises(ConfigError, match="the file's name must be a Python identifier") as error:
        load_stages(path)
    assert error.value.value == str(path)


def test_an_import_that_raises_names_the_file_and_line(write: Write) -> None:
    path = write(
        "broken.py",
        with_header("""
        CALIBRATION = {"a": 1}
        GAIN = CALIBRATION["b"]
        """),
    )
    line = path.read_text().splitlines().index('GAIN = CALIBRATION["b"]') + 1
    with pytest.raises(ConfigError, match=f"importing it failed \\(line {line}\\): KeyError") as e:
        load_stages(path)
    assert e.value.value == str(path)
    assert "broken" not in sys.modules  # the half-imported module is gone


def test_a_file_named_after_a_module_in_use_is_refused_and_the_module_kept(write: Write) -> None:
    path = write("again.py", HEADER)
    sentinel = object()
    sys.modules["again"] = sentinel  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="is the name of a module in use"):
        load_stages(path)
    assert sys.modules["again"] is sentinel


def test_a_stage_bound_to_two_names_is_one_stage(write: Write) -> None:
    path = write(
        "aliased.py",
        HEADER
        + "\n@order_insensitive(schema=[('event', pa.int64())])\n"
        "def calibrate(table):\n    return table\n\nalias = calibrate\n",
    )
    assert [stage.name for stage in load_stages(path)] == ["calibrate"]


def test_a_syntax_error_names_the_file(write: Write) -> None:
    path = write("typo.py", "def calibrate(table:\n")
    with pytest.raises(ConfigError, match=r"importing it failed.*SyntaxError") as error:
        load_stages(path)
    assert str(path) in str(error.value)


def test_a_module_without_stages_is_refused(write: Write) -> None:
    path = write("empty.py", HEADER + "\ndef calibrate(table):\n    return table\n")
    with pytest.raises(ConfigError, match="defines no stage") as error:
        load_stages(path)
    assert error.value.value == str(path)


def test_an_empty_stages_list_is_refused(write: Write) -> None:
    path = write("nothing.py", "STAGES = []\n")
    with pytest.raises(ConfigError, match="defines no stage"):
        load_stages(path)


def test_a_stages_list_holding_a_non_stage_is_refused(write: Write) -> None:
    path = write(
        "mixed.py",
        with_header("""
        @order_insensitive(schema=[("event", pa.int64())])
        def calibrate(table):
            return table

        def helper(table):
            return table

        STAGES = [calibrate, helper]
        """),
    )
    with pytest.raises(ConfigError, match=r"STAGES holds non-stages: .*helper") as error:
        load_stages(path)
    assert error.value.value == str(path)
