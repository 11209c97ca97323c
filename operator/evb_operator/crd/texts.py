"""The descriptions of the ``EventBuilder`` spec's fields, each written once, beside its field: the
CRD's builders take every description from :func:`described`, and the README's tables of the
spec's fields (:mod:`evb_operator.crd.tables`) show the same texts.

Where a spec field's text is:

- an orderer parameter (``buildWindow``, ``flowControl.queueXoff``...): its field of
  :class:`orderer.config.OrdererConfig` (:func:`orderer.config.spec_field`, read by
  :mod:`evb_operator.crd.parameters`, which adds ``Live.`` to a live one);
- a field that is a setting of a command the operator runs (:data:`BORROWED`: ``orderers`` is
  ``evb serve``'s ``orderers``, ``spark.dt`` is ``evb spark-job --dt``): the setting's field of
  :class:`~orderer.flags.serve.ServeCommand`, :class:`~orderer.flags.forward.ForwardCommand` or
  :class:`~orderer.job_config.JobConfig`, the text its flag's help shows, then what the CRD says
  of the spec field alone (``Building.``, ``Immutable.``, what unset means in the cluster),
  written in the table; a flag of that command it names that is a spec field too is named as
  the spec names it (``--no-build`` -> ``noBuild``, ``--sources`` -> ``spec.sources``);
- every other field: its field of the typed spec (:mod:`evb_operator.typed_spec`, from
  :class:`~evb_operator.typed_spec.ValidSpec` down), whose docstring's first paragraph is the
  description. A borrowed field's docstring there names the setting that describes it ("Described
  by ``JobConfig.dt``.") instead of describing it again.

A description is the text's first paragraph (:func:`orderer.config.summary`) without its markup
(:func:`orderer.config.plain_text`): what ``kubectl explain`` shows. Not fields of the typed
spec, so written once where they are built: the spec itself (``crd.definition``), the items of a
list (an upstream, a source id) and the insides of the Kubernetes objects the spec passes on
verbatim (a container's ``resources``, a NetworkPolicy peer's selectors).
"""

from __future__ import annotations

import argparse
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from types import MappingProxyType
from typing import Any

from evb_operator.typed_spec import ValidSpec
from orderer import job_config
from orderer.config import OrdererConfig, camel_case, field_text, plain_text, summary
from orderer.flags import forward, serve
from orderer.flags.forward import ForwardCommand
from orderer.flags.serve import ServeCommand
from orderer.flags.values import flag
from orderer.job_config import JobConfig

__all__ = [
    "BORROWED",
    "JOB_FLAGS",
    "Borrowed",
    "described",
    "spec_text",
    "typed_field",
]


@dataclass(frozen=True)
class Borrowed:
    """A spec field described by the setting it becomes in a command the operator runs."""

    owner: type
    """The command's configuration: ServeCommand, ForwardCommand or JobConfig."""
    field: str
    """The setting's field there, whose text is the description."""
    suffix: str = ""
    """What the CRD says of the spec field alone, after the text (reStructuredText, as the
    texts): a rule of the CRD's, what unset means in the cluster."""


BORROWED: Mapping[str, Borrowed] = MappingProxyType(
    {
        "orderers": Borrowed(
            ServeCommand, "orderers", " Above 1, ``sliceTicks`` is required. Immutable."
        ),
        "sliceTicks": Borrowed(
            ServeCommand, "slice_ticks", " Refused with one orderer. Immutable."
        ),
        "upstreams.target": Borrowed(
            ForwardCommand,
            "upstream",
            " Its ``host:port``: another EventBuilder's Service,"
            " NAME-orderer.NAMESPACE.svc:50051.",
        ),
        "upstreams.asSource": Borrowed(ForwardCommand, "as_source"),
        "upstreams.consumer": Borrowed(
            ForwardCommand,
            "consumer",
            " Not '--', which no command line passes on (argparse drops it).",
        ),
        "orderer.fsync": Borrowed(ServeCommand, "fsync"),
        "orderer.maxPayloadBytes": Borrowed(ServeCommand, "max_payload_bytes"),
        "orderer.strictSources": Borrowed(ServeCommand, "strict_sources"),
        "orderer.retentionBytes": Borrowed(ServeCommand, "retention_bytes"),
        "orderer.retentionSeconds": Borrowed(ServeCommand, "retention_seconds"),
        "spark.dt": Borrowed(JobConfig, "dt", " Building."),
        "spark.noBuild": Borrowed(JobConfig, "no_build", " ``dt`` must then be unset. Building."),
        "spark.maxFragments": Borrowed(JobConfig, "max_fragments", " Building."),
        "spark.timestampPolicy": Borrowed(JobConfig, "timestamp_policy", " Building."),
        "spark.followRuns": Borrowed(
            JobConfig,
            "follow_runs",
            " The job then runs until the EventBuilder goes; false: one run, under the"
            " EventBuilder's name. Building.",
        ),
        "spark.glomSourceId": Borrowed(JobConfig, "glom_source_id", " Building."),
        "spark.partitions": Borrowed(
            JobConfig,
            "partitions",
            " Unset: ``executors.instances`` x ``executors.cores`` (one partition per core).",
        ),
        "spark.maxFragmentsPerTrigger": Borrowed(JobConfig, "max_fragments_per_trigger"),
        "spark.triggerInterval": Borrowed(JobConfig, "trigger_seconds", " In seconds."),
        "spark.tickRate": Borrowed(JobConfig, "tick_rate"),
        "spark.output.format": Borrowed(JobConfig, "format", " Building."),
    }
)
"""Spec path (properties joined by dots, a list's items left out: ``upstreams.target``) ->
the setting whose text describes it. The fields of the typed spec that hold them say so in their
docstrings ("Described by ``JobConfig.dt``."); ``tests/operator/crd/test_spec_texts.py`` holds the
two together."""

JOB_FLAGS: Mapping[str, str] = MappingProxyType(
    {
        **{path: b.field for path, b in BORROWED.items() if b.owner is JobConfig},
        "spark.output.path": "output",
        "spark.stages": "stages",
        "spark.ui": "ui",
    }
)
"""Spec path -> the field of :class:`~orderer.job_config.JobConfig` it becomes
(:func:`evb_operator.specs.spark.spark_job_config`; a test holds them): the README's "job
flag". Those that are not borrowed are described by the spec, not by the flag: the job's
``--output``, ``--stages FILE`` and ``--ui [HOST:]PORT`` take more than the spec gives
(``output.path``, a ConfigMap's key, a port)."""

_RENAMED = {"orderer": "orderer_pod"}
"""Top-level properties whose field of ValidSpec has another name (its ``orderer`` is the
parameters)."""

_PARSERS: Mapping[type, Callable[[], argparse.ArgumentParser]] = {
    ServeCommand: serve.build_parser,
    ForwardCommand: forward.build_parser,
    JobConfig: job_config.build_parser,
}


def _item_type(hint: Any) -> Any:
    """The type a field holds: ``X | None`` -> X, ``tuple[X, ...]`` -> X."""
    if isinstance(hint, types.UnionType):
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) is tuple:
        hint = typing.get_args(hint)[0]
    return hint


def typed_field(path: str) -> tuple[type, str]:
    """The class of the typed spec and the name of its field that hold the spec field ``path``
    (``spark.driver.cores`` -> ``(SparkDriver, "cores")``); :class:`LookupError` if none does
    (an orderer parameter, or inside a Kubernetes object passed on verbatim)."""
    owner: Any = ValidSpec
    names = path.split(".")
    for depth, name in enumerate(names):
        renamed = _RENAMED.get(name) if depth == 0 else None
        found = [
            f.name
            for f in fields(owner)
            if (f.name == renamed if renamed else camel_case(f.name) == name)
        ]
        if not found:
            raise LookupError(f"spec.{path}: no field of the typed spec holds it")
        if depth == len(names) - 1:
            break
        owner = _item_type(typing.get_type_hints(owner)[found[0]])
        if not is_dataclass(owner):
            raise LookupError(f"spec.{path}: spec.{'.'.join(names[: depth + 1])} is no section")
    return owner, found[0]


@cache
def _spec_flags(owner: type) -> Mapping[str, str]:
    """The flags of ``owner``'s command that set a spec field -> that field's path: those of
    the settings :data:`BORROWED` names, and for ``evb serve`` the orderer's parameters."""
    parser = _PARSERS[owner]()
    by_field = {b.field: path for path, b in BORROWED.items() if b.owner is owner}
    flags = {
        option: by_field[action.dest]
        for action in parser._actions
        if action.dest in by_field
        for option in action.option_strings
    }
    if owner is ServeCommand:
        flags |= {flag(f.name): camel_case(f.name) for f in fields(OrdererConfig)}
    return MappingProxyType(flags)


_FLAG_LITERAL = re.compile(r"``(--[a-z][a-z0-9-]*)([^`]*)``")
"""A literal that starts with a flag: ````--no-build````, ````--format nscldaq````."""


def _as_named_in_spec(text: str, path: str, owner: type) -> str:
    """``text`` (a setting's) with each flag of ``owner``'s that sets a spec field named as the
    spec names it, relative to ``path``'s section (``--no-build`` -> ``noBuild`` beside
    ``spark.dt``; ``--sources`` -> ``spec.sources`` from ``orderer.strictSources``)."""
    section = path.rpartition(".")[0]
    spec_flags = _spec_flags(owner)

    def named(match: re.Match[str]) -> str:
        target = spec_flags.get(match.group(1))
        if target is None:
            return match.group(0)
        if section and target.startswith(section + "."):
            target = target[len(section) + 1 :]
        elif section or "." in target:
            target = f"spec.{target}"
        return f"``{target}{match.group(2)}``"

    return _FLAG_LITERAL.sub(named, text)


def spec_text(path: str) -> str:
    """The text of the spec field ``path``, one line of reStructuredText: a borrowed setting's
    summary, as the spec names things, then its suffix (:data:`BORROWED`); else the summary of
    its typed field's text (:func:`typed_field`)."""
    borrowed = BORROWED.get(path)
    if borrowed is not None:
        text = summary(field_text(borrowed.owner, borrowed.field))
        return _as_named_in_spec(text, path, borrowed.owner) + borrowed.suffix
    return summary(field_text(*typed_field(path)))


def described(path: str) -> str:
    """The CRD's description of the spec field ``path`` (:func:`spec_text`, without markup)."""
    return plain_text(spec_text(path))
