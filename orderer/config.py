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

Each parameter is written once, on its field: its default; its text, the docstring right under
it; and in its :class:`SpecField` (the field's ``metadata``) the bounds and whether it is live,
from which the operator generates the orderer's part of the CRD and :data:`LIVE_PARAMETERS` is
drawn. The text's first paragraph is its summary, the CRD's description (``kubectl explain``)
and the flag's help; the paragraphs after it say why.

Field texts (:func:`field_texts`): every configuration of evb (these parameters, ``evb serve``'s
settings, what ``evb forward`` forwards where, the Spark job's flags) describes each field once,
in the attribute docstring right under the field, as kopf's configuration does; the flags' help,
the README's tables of the fields (``tests/orderer/test_field_texts.py``) and the CRD's
descriptions are drawn from it. Why the docstring and not ``field(metadata={"help": ...})``: the
text stays where a reader of the class looks, in the form editors and Sphinx show, and a field
that has nothing but a default needs no ``field()`` call for it. Python keeps no attribute
docstring at run time, so they are read from the class's source with :mod:`ast` (once per
module, cached): evb is installed from its sources (a wheel's ``.py`` files, an editable
install), and nothing reads a text when a module is imported, only when a parser, a CRD or a
table is built, so a copy without sources would fail there, naming the module, not at import.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import itertools
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import Field, dataclass, field, fields, is_dataclass, replace
from functools import cache
from types import MappingProxyType
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
    "field_text",
    "field_texts",
    "flag_help",
    "markdown_table",
    "markdown_text",
    "parameter_names",
    "parameter_value",
    "parse_source_timeout",
    "plain_text",
    "snake_case",
    "spec_field",
    "summary",
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
    the operator generates its CRD property from it (``evb_operator.crd.parameters``): the default
    is the field's own, the description the summary of the field's text (:func:`spec_field`
    fills it in), and the bounds and live flag are written here once rather than restated by
    hand in the CRD."""

    description: str = ""
    """The short description ``kubectl explain`` shows (a live parameter gets `` Live.``). Left
    empty on a field of :class:`OrdererConfig` or :class:`FlowControl`: :func:`spec_field` gives
    the summary of the field's text; written for what is not such a field (a list's items, a
    setting of the operator's own)."""
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


def _spec(**more: Any) -> dict[str, SpecField]:
    """A field's ``metadata``: its :class:`SpecField`, the description left to its text."""
    return {_SPEC: SpecField(**more)}


def _own_spec(f: Field[Any]) -> SpecField:
    spec = f.metadata[_SPEC]
    assert isinstance(spec, SpecField)
    return spec


def spec_field(f: Field[Any]) -> SpecField:
    """The :class:`SpecField` of a field of :class:`OrdererConfig` or :class:`FlowControl`, its
    description the summary of the field's text (:func:`summary`)."""
    spec = _own_spec(f)
    for owner in (OrdererConfig, FlowControl):
        if owner.__dataclass_fields__.get(f.name) is f:
            return replace(spec, description=summary(field_text(owner, f.name)))
    raise LookupError(f"{f.name} is a field of neither OrdererConfig nor FlowControl")


def snake_case(key: str) -> str:
    """``buildWindow`` -> ``build_window``: CR spec spelling to parameter names."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def camel_case(key: str) -> str:
    """``build_window`` -> ``buildWindow``: parameter names to the CR spec spelling."""
    head, *rest = key.split("_")
    return head + "".join(word.capitalize() for word in rest)


# ------------------------------------------------------------------------ field texts


@cache
def _module_tree(module_name: str) -> ast.Module:
    """The parsed source of a module, once per module (the texts of all its classes)."""
    module = sys.modules[module_name]
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError) as error:  # no source: a frozen or source-less install
        raise LookupError(
            f"{module_name}: its source cannot be read, and the fields' texts are its"
            " attribute docstrings"
        ) from error
    return ast.parse(source)


@cache
def field_texts(cls: type) -> Mapping[str, str]:
    """Each field's text: the string literal right under its annotated assignment in the class
    body (its attribute docstring), cleaned as ``inspect.cleandoc`` cleans a docstring; a field
    without one is absent. ``cls`` is a class at the top level of its module or nested in
    one; its module's source is parsed once. :class:`LookupError` if the source cannot be
    read."""
    body: list[ast.stmt] = _module_tree(cls.__module__).body
    for name in cls.__qualname__.split("."):
        (node,) = [n for n in body if isinstance(n, ast.ClassDef) and n.name == name]
        body = node.body
    texts: dict[str, str] = {}
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            texts[statement.target.id] = inspect.cleandoc(following.value.value)
    return MappingProxyType(texts)


def field_text(cls: type, name: str) -> str:
    """The text of the field ``name`` of ``cls`` (:func:`field_texts`); :class:`LookupError`
    naming the field if it has none."""
    try:
        return field_texts(cls)[name]
    except KeyError:
        raise LookupError(f"{cls.__qualname__}.{name} has no text (a docstring under it)") from None


def summary(text: str) -> str:
    """The first paragraph of a field's text on one line: what a CRD description and a flag's
    help show (the paragraphs after it say why, for the source's readers and the README)."""
    return " ".join(text.split("\n\n", 1)[0].split())


_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
"""A Sphinx cross-reference, ``:func:`~orderer.config.camel_case``` or ``:mod:`text <x>```."""


def _shown_role(match: re.Match[str]) -> str:
    whole, target = match.group(0), match.group(1)
    return target.rsplit(".", 1)[-1] if ":`~" in whole else target


def plain_text(text: str) -> str:
    """``text`` without its reStructuredText markup: ````x```` -> ``x``, a cross-reference ->
    the name it shows."""
    return _ROLE.sub(_shown_role, text).replace("``", "")


def flag_help(cls: type, name: str) -> str:
    """The help of the flag that sets the field ``name`` of ``cls``: the summary of its text
    (:func:`summary`) in argparse's style, without markup, its first word in lower case unless
    it is a name (``PEM``, ``N,``) and without the final full stop, ``%`` escaped (argparse
    formats a help with ``%``); the caller adds the default."""
    text = plain_text(summary(field_text(cls, name)))
    first = text.split(" ", 1)[0]
    if first[:1].isupper() and (len(first) == 1 or first[1:2].islower()):
        text = text[0].lower() + text[1:]
    if text.endswith(".") and not text.endswith("..."):
        text = text[:-1]
    return text.replace("%", "%%")


def markdown_text(text: str) -> str:
    """A field's whole text as one Markdown table cell: its paragraphs on one line, the
    reStructuredText literals and cross-references as code, ``|`` escaped (a cell's end
    otherwise) and, outside code, ``<`` (``<batch>`` would be read as HTML)."""
    text = " ".join(text.split())
    text = _ROLE.sub(lambda match: f"``{_shown_role(match)}``", text)
    parts = text.split("``")
    parts[::2] = [part.replace("<", "\\<") for part in parts[::2]]
    return "`".join(parts).replace("|", "\\|")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table (no trailing newline): ``header``, then ``rows`` (cells as written)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


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

    global_xoff: int = field(default=4_000_000, metadata=_spec(minimum=1))
    """Pause sources above this many fragments queued in all.

    Not the sources holding the output back (an empty queue, or a frontier at the mark): their
    data is what lets the others drain."""
    global_xon: int = field(default=3_000_000, metadata=_spec(minimum=1))
    """... and resume them below this many."""
    queue_xoff: int = field(default=400_000, metadata=_spec(minimum=1))
    """Pause a source whose own queue holds more than this many fragments."""
    queue_xon: int = field(default=50_000, metadata=_spec(minimum=1))
    """... and resume it below this many."""

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
        default=20.0, metadata=_spec(minimum=0, exclusive_minimum=True, live=True)
    )
    """Seconds a fragment may wait for the other sources (window rule)."""
    startup_delay: float = field(default=2.0, metadata=_spec(minimum=0, live=True))
    """Seconds after the first fragment before anything is emitted."""
    barrier_timeout: float | None = field(
        default=None, metadata=_spec(minimum=0, exclusive_minimum=True, live=True)
    )
    """Seconds a barrier waits for the other sources; unset: 4 x buildWindow.

    In Python unset is ``None``; :attr:`effective_barrier_timeout` is the timeout in force."""
    source_timeout: float | None = field(default=60.0, metadata=_spec(minimum=0, live=True))
    """Seconds of silence after which a source is dead; 0 disables dead-source detection (the
    spec's off).

    ``off`` disables it too, in flags, files and ``Configure``; in Python disabled is ``None``
    (:func:`parse_source_timeout`)."""
    late_policy: str = field(default="emit", metadata=_spec(enum=LATE_POLICIES, live=True))
    """emit: late fragments go out flagged late; drop: counted, not emitted."""
    reset_on_begin_run: bool = field(default=False, metadata=_spec())
    """A complete begin-run barrier (type 1 from every source) restarts the clocks (high-water
    mark, previous timestamps, watermarks), so a run whose clocks restart at 0 is not late
    (NSCLDAQ's EVB::reset). Immutable: the orderer replays its log with the rule it started
    with.

    Opt-in: docs/ordering.md, "Runs one after another"."""
    sources: tuple[int, ...] = field(
        default=(),
        metadata=_spec(
            items=SpecField("A source id.", minimum=0, maximum=_MAX_SOURCE_ID), max_items=65536
        ),
    )
    """Source ids declared from the start; a declared source that never sends holds the output
    back (immutable)."""
    flow_control: FlowControl = field(default_factory=FlowControl, metadata=_spec())
    """Bounded memory: when sources are paused (XOFF) and resumed (XON), in queued fragments.
    Defaults are NSCLDAQ's."""

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


LIVE_PARAMETERS = tuple(f.name for f in fields(OrdererConfig) if _own_spec(f).live)
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
