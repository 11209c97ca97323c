"""The orderer's configuration: one frozen dataclass, built the same way by every entry point.

Keys are the parameter names of ``docs/ordering.md`` (``build_window``); the camelCase spelling of
the EventBuilder custom resource (``buildWindow``) is accepted too, so a CR spec, a YAML file for
``evb serve`` and the flags of ``evb replay`` all land here. Every invalid value raises
:class:`~orderer.errors.ConfigError` naming the parameter, and an unknown key is answered with
the nearest known one (:func:`unknown_key`): a misspelt key is the usual mistake in a file.

The custom resource's spellings mean the same everywhere: ``sourceTimeout: 0`` (the CR's "off",
its schema being a number) and ``off`` both disable dead-source detection, whether they come
from a CR spec, a ``--config`` file, a flag or ``Configure``; :func:`parse_source_timeout` is
the one place that says so.

Each parameter is written once, on its field: its default, and in its :class:`SpecField` (the
field's ``metadata``) the short description, the bounds and whether it is live, from which the
operator generates the orderer's part of the CRD and :data:`LIVE_PARAMETERS` is drawn; the
field's docstring keeps the why.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import Field, dataclass, field, fields, is_dataclass, replace
from typing import Any

from orderer.errors import ConfigError

__all__ = [
    "LATE_POLICIES",
    "LIVE_PARAMETERS",
    "SOURCE_COUNTERS",
    "TOTAL_COUNTERS",
    "FlowControl",
    "OrdererConfig",
    "SpecField",
    "camel_case",
    "check_keys",
    "parameter_names",
    "parameter_value",
    "parse_source_timeout",
    "snake_case",
    "spec_field",
    "unknown_key",
]

LATE_POLICIES = ("emit", "drop")
TOTAL_COUNTERS = ("received", "emitted", "late", "dropped", "duplicates", "out_of_order")
"""Counters of docs/ordering.md that are summed into ``totals``."""
SOURCE_COUNTERS = (*TOTAL_COUNTERS, "max_lateness", "barriers")
"""Counters of docs/ordering.md kept per source."""
_MAX_SOURCE_ID = 2**32 - 1


@dataclass(frozen=True)
class SpecField:
    """How one parameter shows in the EventBuilder spec, held on its field (``metadata``) so that
    the operator generates its CRD property from it (``evb_operator.crd_parameters``): the default
    is the field's own, and the text, bounds and live flag are written here once rather than
    restated by hand in the CRD. The field's docstring keeps the why."""

    description: str
    """The short description ``kubectl explain`` shows (a live parameter gets `` Live.``)."""
    minimum: float | None = None
    """The least value the CRD accepts (the validation below says the same in Python)."""
    exclusive_minimum: bool = False
    """``minimum`` itself refused."""
    maximum: float | None = None
    """The largest value; None: the CRD's own bound for its type (a duration's one day)."""
    enum: tuple[str, ...] = ()
    """The values a string parameter takes."""
    live: bool = False
    """A running orderer may change it (``Configure``, the operator's live edits):
    :data:`LIVE_PARAMETERS`."""
    items: SpecField | None = None
    """A list's items (a list of the orderer's is a set: it refuses duplicates)."""
    max_items: int | None = None
    """Most items of a list."""


_SPEC = "evb.spec"


def _spec(description: str, **more: Any) -> dict[str, SpecField]:
    """A field's ``metadata``: its :class:`SpecField`."""
    return {_SPEC: SpecField(description, **more)}


def spec_field(f: Field[Any]) -> SpecField:
    """The :class:`SpecField` of a field of :class:`OrdererConfig` or :class:`FlowControl`."""
    spec = f.metadata[_SPEC]
    assert isinstance(spec, SpecField)
    return spec


def snake_case(key: str) -> str:
    """``buildWindow`` -> ``build_window``: CR spec spelling to parameter names."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def camel_case(key: str) -> str:
    """``build_window`` -> ``buildWindow``: parameter names to the CR spec spelling."""
    head, *rest = key.split("_")
    return head + "".join(word.capitalize() for word in rest)



def unknown_key(key: str, value: Any, known: Iterable[str], *, prefix: str = "") -> ConfigError:
    """The error for a key that is none of ``known`` (parameter names). It suggests the nearest
    known key, if one is close, and lists them all in the CR's camelCase spelling, the one the
    documentation and ``kubectl explain`` show: ``barierTimeout`` -> ``did you mean
    barrierTimeout?``."""
    names = list(dict.fromkeys(camel_case(name) for name in known))
    by_lower = {name.lower(): name for name in names}
    written = camel_case(snake_case(str(key))).lower()
    close = difflib.get_close_matches(written, list(by_lower), n=1, cutoff=0.6)
    hint = f"did you mean {camel_case(prefix)}{by_lower[close[0]]}? " if close else ""
    return ConfigError(
        f"{prefix}{key}", value, f"unknown key; {hint}known keys: {', '.join(names)}"
    )


def check_keys(mapping: Mapping[Any, Any], known: Iterable[str], *, prefix: str = "") -> None:
    """Raise :func:`unknown_key`'s error for the first key of ``mapping`` (either spelling)
    that is none of ``known`` (parameter names)."""
    names = list(known)
    for key, value in mapping.items():
        if snake_case(str(key)) not in names:
            raise unknown_key(str(key), value, names, prefix=prefix)


def _duration(name: str, value: Any, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(name, value, "must be a number of seconds")
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(name, value, "must be a number of seconds") from None
    if not math.isfinite(seconds):
        raise ConfigError(name, value, "must be finite")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ConfigError(name, value, "must be >= 0" if allow_zero else "must be > 0")
    return seconds


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(name, value, "must be a positive integer")
    return value


@dataclass(frozen=True)
class FlowControl:
    """Bounded memory: when the orderer asks sources to pause (XOFF) and resume (XON).

    Defaults are NSCLDAQ's. Counts are fragments waiting in queues, not bytes.
    """

    global_xoff: int = field(
        default=4_000_000,
        metadata=_spec("Pause sources above this many fragments queued in all.", minimum=1),
    )
    """All sources but the ones holding the output back pause above this many queued fragments."""
    global_xon: int = field(
        default=3_000_000, metadata=_spec("... and resume them below this many.", minimum=1)
    )
    """... and resume below this many."""
    queue_xoff: int = field(
        default=400_000,
        metadata=_spec(
            "Pause a source whose own queue holds more than this many fragments.", minimum=1
        ),
    )
    """A source pauses when its own queue holds more than this many fragments."""
    queue_xon: int = field(
        default=50_000, metadata=_spec("... and resume it below this many.", minimum=1)
    )
    """... and resumes when its queue is back below this many."""

    def __post_init__(self) -> None:
        for f in fields(self):
            _count(f"flow_control.{f.name}", getattr(self, f.name))
        if self.global_xon > self.global_xoff:
            raise ConfigError("flow_control.global_xon", self.global_xon, "must be <= global_xoff")
        if self.queue_xon > self.queue_xoff:
            raise ConfigError("flow_control.queue_xon", self.queue_xon, "must be <= queue_xoff")


@dataclass(frozen=True)
class OrdererConfig:
    """Parameters of ``docs/ordering.md``; durations are seconds."""

    build_window: float = field(
        default=20.0,
        metadata=_spec(
            "Seconds a fragment may wait for the other sources (window rule).",
            minimum=0,
            exclusive_minimum=True,
            live=True,
        ),
    )
    """How long a fragment may wait for the other sources (window rule)."""
    startup_delay: float = field(
        default=2.0,
        metadata=_spec(
            "Seconds after the first fragment before anything is emitted.", minimum=0, live=True
        ),
    )
    """Nothing is emitted until this long after the first fragment arrived."""
    barrier_timeout: float | None = field(
        default=None,
        metadata=_spec(
            "Seconds a barrier waits for the other sources; unset: 4 x buildWindow.",
            minimum=0,
            exclusive_minimum=True,
            live=True,
        ),
    )
    """How long a barrier waits for the other sources; ``None`` means 4 x build_window."""
    source_timeout: float | None = field(
        default=60.0,
        metadata=_spec(
            "Seconds of silence after which a source is dead; 0 disables dead-source"
            " detection (the spec's off).",
            minimum=0,
            live=True,
        ),
    )
    """A source silent this long is dead; ``None`` disables (``off`` or ``0`` in flags, files
    and specs: :func:`parse_source_timeout`)."""
    late_policy: str = field(
        default="emit",
        metadata=_spec(
            "emit: late fragments go out flagged late; drop: counted, not emitted.",
            enum=LATE_POLICIES,
            live=True,
        ),
    )
    """``emit``: late fragments go out flagged late; ``drop``: counted and not emitted."""
    reset_on_begin_run: bool = field(
        default=False,
        metadata=_spec(
            "A complete begin-run barrier (type 1 from every source) restarts the clocks"
            " (high-water mark, previous timestamps, watermarks), so a run whose clocks restart"
            " at 0 is not late (NSCLDAQ's EVB::reset). Immutable: the orderer replays its log"
            " with the rule it started with."
        ),
    )
    """Opt-in: a complete begin-run barrier (every source sent type 1) restarts the clocks: the
    high-water mark, previous timestamps and watermarks are forgotten, so a next run whose
    clocks start again at 0 is not late (docs/ordering.md, "Runs one after another")."""
    sources: tuple[int, ...] = field(
        default=(),
        metadata=_spec(
            "Source ids declared from the start; a declared source that never sends holds the"
            " output back (immutable).",
            items=SpecField("A source id.", minimum=0, maximum=_MAX_SOURCE_ID),
            max_items=65536,
        ),
    )
    """Sources declared from the start; a declared source that never sends holds the output."""
    flow_control: FlowControl = field(
        default_factory=FlowControl,
        metadata=_spec(
            "Bounded memory: when sources are paused (XOFF) and resumed (XON), in queued"
            " fragments. Defaults are NSCLDAQ's."
        ),
    )
    """Pause/resume thresholds for bounded memory."""

    def __post_init__(self) -> None:
        _duration("build_window", self.build_window)
        _duration("startup_delay", self.startup_delay, allow_zero=True)
        if self.barrier_timeout is not None:
            _duration("barrier_timeout", self.barrier_timeout)
        if self.source_timeout is not None:
            _duration("source_timeout", self.source_timeout)
        if self.late_policy not in LATE_POLICIES:
            raise ConfigError("late_policy", self.late_policy, "must be 'emit' or 'drop'")
        if not isinstance(self.reset_on_begin_run, bool):
            raise ConfigError(
                "reset_on_begin_run", self.reset_on_begin_run, "must be true or false"
            )
        for source in self.sources:
            if isinstance(source, bool) or not isinstance(source, int):
                raise ConfigError("sources", source, "source ids must be integers")
            if not 0 <= source <= _MAX_SOURCE_ID:
                raise ConfigError("sources", source, "source ids must fit in uint32")
        if len(set(self.sources)) != len(self.sources):
            raise ConfigError("sources", list(self.sources), "source ids must be unique")

    @property
    def effective_barrier_timeout(self) -> float:
        """The barrier timeout in force: the explicit one, else 4 x build_window."""
        if self.barrier_timeout is not None:
            return self.barrier_timeout
        return 4.0 * self.build_window

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> OrdererConfig:
        """Build from spec-named keys (snake_case or camelCase); unknown keys are an error."""
        check_keys(mapping, [f.name for f in fields(cls)])
        values = {snake_case(key): value for key, value in mapping.items()}
        for name in ("build_window", "startup_delay", "barrier_timeout"):
            if name in values and values[name] is not None:
                values[name] = _duration(name, values[name], allow_zero=name == "startup_delay")
        if "source_timeout" in values:
            values["source_timeout"] = parse_source_timeout(values["source_timeout"])
        if "reset_on_begin_run" in values:
            values["reset_on_begin_run"] = _switch(
                "reset_on_begin_run", values["reset_on_begin_run"]
            )
        if "sources" in values:
            values["sources"] = _sources(values["sources"])
        if "flow_control" in values:
            values["flow_control"] = _flow_control(values["flow_control"])
        return cls(**values)

    def to_mapping(self, *, camel: bool = False) -> dict[str, Any]:
        """The inverse of :meth:`from_mapping`; ``camel=True`` gives the CR spelling."""
        name = camel_case if camel else str
        out: dict[str, Any] = {
            name("build_window"): self.build_window,
            name("startup_delay"): self.startup_delay,
            name("barrier_timeout"): self.barrier_timeout,
            name("source_timeout"): "off" if self.source_timeout is None else self.source_timeout,
            name("late_policy"): self.late_policy,
            name("reset_on_begin_run"): self.reset_on_begin_run,
            name("sources"): list(self.sources),
            name("flow_control"): {
                name(f.name): getattr(self.flow_control, f.name) for f in fields(FlowControl)
            },
        }
        return out

    def with_changes(self, **changes: Any) -> OrdererConfig:
        """A copy with some parameters changed (live reconfiguration), validated again."""
        return replace(self, **changes)


LIVE_PARAMETERS = tuple(f.name for f in fields(OrdererConfig) if spec_field(f).live)
"""The parameters a running orderer may change (``Configure``, the operator's live edits): the
fields whose :class:`SpecField` says live."""


def parameter_names() -> tuple[str, ...]:
    """Every parameter a user sets on its own, by name: the fields of :class:`OrdererConfig`,
    a nested group's fields dotted (``flow_control.queue_xoff``). Why: a restart weighs each
    parameter the user gave against the run's recorded one (a ``--config`` file may give one
    flow-control threshold alone), and a new field is weighed without anyone listing it."""
    names: list[str] = []
    defaults = OrdererConfig()
    for f in fields(OrdererConfig):
        value = getattr(defaults, f.name)
        if is_dataclass(value):
            names.extend(f"{f.name}.{inner.name}" for inner in fields(value))
        else:
            names.append(f.name)
    return tuple(names)


def parameter_value(config: OrdererConfig, name: str) -> Any:
    """The value of one of :func:`parameter_names` in ``config``."""
    value: Any = config
    for part in name.split("."):
        value = getattr(value, part)
    return value


def parse_source_timeout(value: Any) -> float | None:
    """Seconds > 0, or ``None``: dead-source detection disabled.

    Disabled is spelt ``off`` (docs/ordering.md), ``0`` (the CR's spelling: its schema is a number;
    a timeout of zero seconds would declare every source dead at once, so zero has no other use),
    ``None``, or ``false`` (YAML 1.1 reads an unquoted ``off`` as false). The operator, ``evb
    serve --config``, the flags and ``Configure`` all come here, so the spellings mean the same
    everywhere."""
    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip().lower() == "off":
        return None
    try:
        seconds = _duration("source_timeout", value, allow_zero=True)
    except ConfigError:
        raise ConfigError(
            "source_timeout", value, "must be a number of seconds > 0, or 0 or off"
        ) from None
    return None if seconds == 0 else seconds


def _switch(name: str, value: Any) -> bool:
    """A yes/no parameter: a boolean, or ``true``/``false`` spelt out (a flag's value, or the
    ``str(True)`` of a worked example's config.json turned into a flag)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(name, value, "must be true or false")


def _sources(value: Any) -> tuple[int, ...]:
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        try:
            return tuple(int(p) for p in parts)
        except ValueError:
            raise ConfigError("sources", value, "must be a comma-separated list of ids") from None
    if not isinstance(value, Iterable):
        raise ConfigError("sources", value, "must be a list of source ids")
    return tuple(value)


def _flow_control(value: Any) -> FlowControl:
    if isinstance(value, FlowControl):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError("flow_control", value, "must be a mapping")
    check_keys(value, [f.name for f in fields(FlowControl)], prefix="flow_control.")
    return FlowControl(**{snake_case(str(key)): item for key, item in value.items()})
