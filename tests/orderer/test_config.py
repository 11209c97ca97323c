"""OrdererConfig: spec names and CR camelCase names, defaults, and errors naming the parameter."""

from __future__ import annotations

from dataclasses import fields

import pytest

from orderer import ConfigError, FlowControl, Orderer, OrdererConfig
from orderer.config import spec_field


def test_defaults_are_the_spec_defaults() -> None:
    config = OrdererConfig()
    assert config.build_window == 20.0
    assert config.startup_delay == 2.0
    assert config.effective_barrier_timeout == 80.0
    assert config.source_timeout == 60.0
    assert config.late_policy == "emit"
    assert config.flow_control == FlowControl(4_000_000, 3_000_000, 400_000, 50_000)


def test_camel_case_and_snake_case_agree() -> None:
    camel = OrdererConfig.from_mapping(
        {
            "buildWindow": 5,
            "startupDelay": 0,
            "barrierTimeout": 7,
            "sourceTimeout": "off",
            "latePolicy": "drop",
            "sources": [3, 1],
            "flowControl": {"queueXoff": 10, "queueXon": 5},
        }
    )
    snake = OrdererConfig.from_mapping(
        {
            "build_window": 5,
            "startup_delay": 0,
            "barrier_timeout": 7,
            "source_timeout": None,
            "late_policy": "drop",
            "sources": "3,1",
            "flow_control": {"queue_xoff": 10, "queue_xon": 5},
        }
    )
    assert camel == snake
    assert camel.source_timeout is None
    assert OrdererConfig.from_mapping(camel.to_mapping(camel=True)) == camel
    assert OrdererConfig.from_mapping(camel.to_mapping()) == camel


def test_barrier_timeout_follows_the_window_unless_set() -> None:
    assert OrdererConfig(build_window=3).effective_barrier_timeout == 12
    assert OrdererConfig(build_window=3, barrier_timeout=1).effective_barrier_timeout == 1


@pytest.mark.parametrize(
    ("mapping", "parameter"),
    [
        ({"build_window": 0}, "build_window"),
        ({"build_window": float("nan")}, "build_window"),
        ({"startup_delay": -1}, "startup_delay"),
        ({"barrier_timeout": -2}, "barrier_timeout"),
        ({"source_timeout": -1}, "source_timeout"),
        ({"source_timeout": True}, "source_timeout"),
        ({"late_policy": "keep"}, "late_policy"),
        ({"sources": [1, 1]}, "sources"),
        ({"sources": [2**32]}, "sources"),
        ({"windw": 1}, "windw"),
        ({"flow_control": {"queue_xoff": 5, "queue_xon": 6}}, "flow_control.queue_xon"),
        ({"flow_control": {"global_xoff": 0}}, "flow_control.global_xoff"),
        ({"flow_control": {"qxoff": 1}}, "flow_control.qxoff"),
    ],
)
def test_bad_values_name_the_parameter(mapping: dict, parameter: str) -> None:
    with pytest.raises(ConfigError) as error:
        OrdererConfig.from_mapping(mapping)
    assert error.value.parameter == parameter
    assert str(error.value).startswith(parameter)


@pytest.mark.parametrize("off", [0, 0.0, "0", "off", "OFF", False, None])
def test_source_timeout_zero_is_off_as_in_the_custom_resource(off: object) -> None:
    """The CR's schema makes sourceTimeout a number, 0 meaning off; every entry point (the
    operator, --config, the flags, Configure) reads it through from_mapping."""
    assert OrdererConfig.from_mapping({"sourceTimeout": off}).source_timeout is None
    assert OrdererConfig.from_mapping({"source_timeout": off}).source_timeout is None
    assert OrdererConfig.from_mapping({"sourceTimeout": "7.5"}).source_timeout == 7.5


def test_an_unknown_key_suggests_the_nearest_in_the_resource_spelling() -> None:
    with pytest.raises(ConfigError) as error:
        OrdererConfig.from_mapping({"barierTimeout": 5})
    assert error.value.parameter == "barierTimeout"
    assert "did you mean barrierTimeout?" in error.value.why
    assert "buildWindow, startupDelay, barrierTimeout, sourceTimeout" in error.value.why
    with pytest.raises(ConfigError, match="did you mean barrierTimeout"):
        OrdererConfig.from_mapping({"barier_timeout": 5})  # snake_case is matched too
    with pytest.raises(ConfigError) as error:
        OrdererConfig.from_mapping({"flowControl": {"queueXof": 5}})
    assert error.value.parameter == "flow_control.queueXof"
    assert "did you mean flowControl.queueXoff?" in error.value.why
    with pytest.raises(ConfigError) as error:
        OrdererConfig.from_mapping({"colour": "blue"})
    assert "did you mean" not in error.value.why  # nothing close: only the list


def test_live_reconfiguration_changes_the_window_and_keeps_the_queues() -> None:
    import numpy as np

    from orderer import FragmentBatch, SimulatedClock

    orderer = Orderer(
        {"build_window": 100, "startup_delay": 0, "sources": [1, 2]}, clock=SimulatedClock()
    )
    orderer.submit(FragmentBatch.from_arrays(source=1, timestamp=np.arange(5)), now=0.0)
    orderer.advance(now=10.0)
    assert len(orderer.take_emitted()) == 0
    orderer.configure(build_window=5, now=10.0)
    assert orderer.config.build_window == 5
    assert orderer.config.effective_barrier_timeout == 20
    orderer.advance(now=10.0)
    emitted = orderer.take_emitted()
    assert emitted.timestamp.tolist() == [0, 1, 2, 3, 4]
    assert emitted.t.tolist() == [10.0] * 5


def test_the_spec_bounds_of_each_parameter_are_the_ones_it_validates() -> None:
    """A SpecField's minimum (what the CRD accepts) is the validation's: the least value is
    accepted unless exclusive, and anything below it is refused."""
    checked = 0
    for group, build in (
        (OrdererConfig, lambda name, value: OrdererConfig.from_mapping({name: value})),
        (FlowControl, lambda name, value: FlowControl(**{name: value, **_lowest_flow(name)})),
    ):
        for f in fields(group):
            spec = spec_field(f)
            if spec.minimum is None or f.name == "source_timeout":  # 0 is its off
                continue
            kind = int if group is FlowControl else float
            lowest = kind(spec.minimum)
            if spec.exclusive_minimum:
                with pytest.raises(ConfigError):
                    build(f.name, lowest)
            else:
                build(f.name, lowest)
            with pytest.raises(ConfigError):
                build(f.name, lowest - 1)
            checked += 1
    assert checked == 7


def _lowest_flow(name: str) -> dict[str, int]:
    """The other thresholds of a FlowControl whose ``name`` is at its least: XON <= XOFF."""
    xon = {"global_xoff": "global_xon", "queue_xoff": "queue_xon"}.get(name)
    return {} if xon is None else {xon: 1}
