"""The kopf glue of the evb operator: ``kopf run -m evb_operator.handlers``.

Glue only (no manifest and no status is built here): every handler validates
(:mod:`~evb_operator.validation`), builds (:mod:`~evb_operator.specs` and its ``specs_*`` modules,
:mod:`~evb_operator.status`), adopts, creates or patches through :mod:`~evb_operator.kube`, calls
the orderer through :mod:`orderer.client`, and patches the status. Errors are translated here,
once: an invalid spec becomes ``kopf.PermanentError`` with a ``Valid=False`` condition (no retry
loop); an unreachable orderer or API server becomes ``kopf.TemporaryError(delay=...)``. The
handlers of the children's sections (``spec.orderer``/``tls``/``auth``, ``spec.spark``,
``spec.networkPolicy``) are one skeleton, :func:`_reapply`: validate, rebuild, patch (or delete),
translate the errors.

What happens when:

- create / resume / update: the children exist (created under fixed names if absent, never
  replaced); an invalid spec is reported instead;
- a live parameter (``spec.buildWindow``, ``startupDelay``, ``barrierTimeout``,
  ``sourceTimeout``, ``latePolicy``: :data:`orderer.config.LIVE_PARAMETERS`) changes:
  ``Configure`` on the live orderer, no child touched;
- ``spec.orderer`` changes (image, resources, service settings): the StatefulSet's pod template
  is patched, which rolls the pod (the orderer recovers its run from its logs);
- ``spec.spark`` changes: the SparkApplication's spec is patched; the live page's Service
  (``spec.spark.ui``) follows: created by ``reconcile`` when the port is set, its port patched
  when it changes, deleted when it goes;
- ``spec.state`` becomes ``Ended``: ``EndRun``; the Spark job reads to the end and finishes;
  the release of a run over several orderers is scaled to 0;
- ``spec.run`` raised: ``EndRun`` (unless the run ended), then ``BeginRun`` with the new
  number; lowered: refused;
- ``spec.upstreams`` changes: the forwarders' Deployment is patched (rolls them), created by
  ``reconcile`` for the first upstream, deleted with the last;
- every ``EVB_STATS_INTERVAL`` seconds: status from ``GetStats``, the orderer's StatefulSet and
  the SparkApplication (the ``Ready`` condition sums them up), and Events for each incomplete
  or heterogeneous barrier in the orderer's barrier log (a few per period, then a summary),
  bursts of late data, an unreachable orderer, Spark's end;
- delete: the SparkApplication first (it stops reading) and its live page's Service, then the
  orderer's children (the garbage collector would too, through the owner references, in no
  particular order).

A run over several orderers (``spec.orderers`` > 1) gets its children from the same builders
(the headless Service and the release's Deployment among them), and every call above goes to
every orderer, each at its own address under the headless Service (:mod:`evb_operator.control`):
the status sums their answers and has an entry per orderer (:mod:`evb_operator.status_orderers`),
``Ready`` only when every orderer answers; a live edit, ``EndRun`` and ``BeginRun`` reach every
orderer, and when one fails the handler is retried (``kopf.TemporaryError``) without doing again
what the others did; ``observedGeneration`` moves on a live edit only once every orderer applied
it.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import kopf

from evb_operator import constants as c
from evb_operator import control, crd, kube, security, specs, specs_common, specs_live, validation
from evb_operator import status as evb_status
from evb_operator.phases import RunPhase
from orderer import client as orderer_client
from orderer.config import LIVE_PARAMETERS, camel_case
from orderer.errors import ConfigError, EvbError, InterfaceError
from orderer.stats import Stats

RESOURCE = (crd.GROUP, crd.VERSION, crd.PLURAL)
STATS_INTERVAL = float(os.environ.get(c.ENV_STATS_INTERVAL, "10"))
RPC_TIMEOUT = min(5.0, STATS_INTERVAL)
"""Seconds a GetStats may take: an unreachable orderer must not stall the status timer."""
BARRIER_LOG_LIMIT = 1000
"""Resolved barriers each ``GetStats`` of the status timer asks for (the newest): enough for
every barrier of one status period. Barriers mark run control (begin, end, pause), a few per run;
a thousand in one period would be a hundred a second at the default ten-second period. Should
more resolve in one period, the oldest of them are not in the answer: the summary Event counts
them from the orderer's totals, without their offsets or sources
(``status_barriers.barrier_report``). The answer stays small (a few tens of kB)."""
CONTROL_TIMEOUT = 30.0
"""Seconds a Configure or EndRun may take (EndRun drains every queue and syncs the logs)."""
RETRY_DELAY = 10.0

T = TypeVar("T")


# ----------------------------------------------------------------------------- plumbing


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _namespaced(namespace: str | None) -> str:
    """EventBuilders are namespaced: kopf's ``namespace`` is never None for them."""
    if namespace is None:
        raise kopf.PermanentError("an EventBuilder without a namespace")
    return namespace


def _endpoint(name: str, namespace: str, annotations: Mapping[str, str]) -> str:
    override = annotations.get(c.ANNOTATION_ENDPOINT_OVERRIDE)
    if override and os.environ.get(c.ENV_ALLOW_ENDPOINT_OVERRIDE) == "1":
        return override
    return specs_common.orderer_endpoint(name, namespace)


def _endpoints(
    name: str, namespace: str, annotations: Mapping[str, str], orderers: int
) -> tuple[str, ...]:
    """Each orderer's own address, in index order: the run's Service with one orderer; with
    several, pod k's name under the headless Service (``specs_common.orderer_peers``), or, where
    the operator allows the endpoint override (tests), the override's addresses, one per
    orderer, in index order (``127.0.0.1:5001,127.0.0.1:5002,...``)."""
    if orderers == 1:
        return (_endpoint(name, namespace, annotations),)
    override = annotations.get(c.ANNOTATION_ENDPOINT_OVERRIDE)
    if override and os.environ.get(c.ENV_ALLOW_ENDPOINT_OVERRIDE) == "1":
        listed = tuple(address.strip() for address in override.split(","))
        if len(listed) != orderers or not all(listed):
            raise kopf.PermanentError(
                f"annotation {c.ANNOTATION_ENDPOINT_OVERRIDE}: {override!r} names"
                f" {len(listed)} address(es) for {orderers} orderers: give every orderer's,"
                " in index order, separated by commas"
            )
        return listed
    return specs_common.orderer_peers(name, namespace, orderers)


def _generation(body: Mapping[str, Any]) -> int | None:
    """``metadata.generation``: what ``observedGeneration`` reports as acted on or seen."""
    generation = body.get("metadata", {}).get("generation")
    return None if generation is None else int(generation)


def _validate(
    spec: Mapping[str, Any],
    patch: kopf.Patch,
    old_status: Mapping[str, Any],
    generation: int | None,
) -> validation.ValidSpec:
    """The valid spec, or the Invalid status and a PermanentError (reported once)."""
    try:
        return validation.validate(spec)
    except validation.InvalidSpec as error:
        patch.status.update(
            evb_status.invalid(
                old_status,
                field=error.field,
                message=error.message,
                generation=generation,
                now=_now(),
            )
        )
        raise kopf.PermanentError(f"invalid spec: {error}") from None


def _valid_or_none(spec: Mapping[str, Any]) -> validation.ValidSpec | None:
    try:
        return validation.validate(spec)
    except validation.InvalidSpec:
        return None  # the create/update handler reports it


def _kube_error(error: kube.KubeError) -> kopf.TemporaryError | kopf.PermanentError:
    if error.status == 422:  # the API server refuses an object we built: retrying cannot help
        return kopf.PermanentError(f"Kubernetes API: {error}")
    return kopf.TemporaryError(f"Kubernetes API: {error}", delay=RETRY_DELAY * 3)


def _orderer_error(error: EvbError) -> kopf.TemporaryError | kopf.PermanentError:
    if isinstance(error, ConfigError | InterfaceError):
        return kopf.PermanentError(f"the orderer refused: {error}")
    return kopf.TemporaryError(f"orderer unreachable: {error}", delay=RETRY_DELAY)


def _operator_labels() -> dict[str, str]:
    """``EVB_OPERATOR_POD_LABELS`` (``k=v,k=v``, set by the chart) as a mapping."""
    text = os.environ.get(c.ENV_OPERATOR_POD_LABELS, "")
    pairs = [item.split("=", 1) for item in text.split(",") if "=" in item]
    return {key.strip(): value.strip() for key, value in pairs}


def _children(
    name: str, namespace: str, valid: validation.ValidSpec, labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    return specs.build_children(
        name,
        namespace,
        valid,
        orderer_image=os.environ.get(c.ENV_ORDERER_IMAGE, c.DEFAULT_ORDERER_IMAGE),
        spark_image=os.environ.get(c.ENV_SPARK_IMAGE, c.DEFAULT_SPARK_IMAGE),
        operator_namespace=os.environ.get(c.ENV_OPERATOR_NAMESPACE),
        operator_labels=_operator_labels(),
        labels=labels,
    )


@dataclass(frozen=True)
class _Orderer:
    """The orderer of the EventBuilder a handler acts on, and the spec that says how to reach
    it."""

    owner: str
    """The EventBuilder's name."""
    namespace: str
    endpoint: str
    """The run's address (its Service; the status shows it)."""
    valid: validation.ValidSpec | None
    """None for an invalid spec (the create/update handler reports it)."""
    endpoints: tuple[str, ...] = ()
    """Each orderer's own address, in index order (one orderer: ``endpoint``)."""

    @property
    def several(self) -> bool:
        """A run over several orderers: every call goes to each (:mod:`evb_operator.control`)."""
        return len(self.endpoints) > 1


def _orderer(
    *,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    annotations: kopf.Annotations,
    **_: Any,
) -> _Orderer:
    """From a handler's keyword arguments."""
    namespace = _namespaced(namespace)
    valid = _valid_or_none(spec)
    orderers = 1 if valid is None else valid.orderers
    return _Orderer(
        name,
        namespace,
        _endpoint(name, namespace, annotations),
        valid,
        _endpoints(name, namespace, annotations, orderers),
    )


async def _control(call: Callable[..., Awaitable[T]], orderer: _Orderer, *args: Any) -> T:
    """``call`` (``Configure``, ``EndRun``) on the orderer, reached as its spec says
    (plaintext without a valid spec); its errors translated."""
    valid = orderer.valid
    try:
        reach = None if valid is None else await _security(valid, orderer.namespace)
        return await call(orderer.endpoint, *args, timeout=CONTROL_TIMEOUT, security=reach)
    except EvbError as error:
        raise _orderer_error(error) from None


def _failed(what: str, outcomes: Sequence[control.Outcome[Any]]) -> None:
    """Raise for the orderers whose call failed, naming each: PermanentError when one refused
    (nothing a retry changes), else TemporaryError (kopf retries the handler, which does again
    only what did not happen); nothing when every call succeeded."""
    failed = control.failures(outcomes)
    if not failed:
        return
    lines = "; ".join(f"orderer {o.index} ({o.endpoint}): {o.error}" for o in failed)
    done = len(outcomes) - len(failed)
    message = f"{what} at {done} of {len(outcomes)} orderers; not at {lines}"
    if any(isinstance(o.error, ConfigError | InterfaceError) for o in failed):
        raise kopf.PermanentError(f"the orderer refused: {message}")
    raise kopf.TemporaryError(message, delay=RETRY_DELAY)


async def _reach(orderer: _Orderer) -> orderer_client.ChannelSecurity | None:
    """How to reach the orderers (:func:`_security`), a missing Secret translated."""
    if orderer.valid is None:
        return None
    try:
        return await _security(orderer.valid, orderer.namespace)
    except EvbError as error:
        raise _orderer_error(error) from None


async def _security(
    valid: validation.ValidSpec, namespace: str
) -> orderer_client.ChannelSecurity | None:
    """How to reach this orderer (TLS, client certificate, token), from the Secrets the spec
    names; raises ``SecretProblem`` (an ``EvbError``) when one is missing."""
    names = security.secret_names(valid)
    if not names:
        return None
    secrets = {}
    for secret in names:
        try:
            found = await kube.current().get("v1", "Secret", namespace, secret)
        except kube.KubeError as error:
            raise security.SecretProblem(f"cannot read Secret {secret}: {error}") from None
        secrets[secret] = security.decode_secret(found)
    return security.client_security(valid, secrets)


def _child(
    children: list[dict[str, Any]], child: specs_common.ChildKind, owner: str
) -> dict[str, Any] | None:
    """The child of that kind and name among ``children`` (two share a kind: the Services of a
    run over several orderers, the forwarders' and the release's Deployments)."""
    name = child.name(owner)
    return next(
        (c for c in children if c["kind"] == child.kind and c["metadata"]["name"] == name), None
    )


# ----------------------------------------------------------------------------- activities


@kopf.on.startup()
def configure_operator(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Progress and the last handled spec in annotations under evb.io (the status subresource
    holds only what the CRD declares), and our own finalizer name."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=crd.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=crd.GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{crd.GROUP}/finalizer"
    settings.posting.level = logging.WARNING  # Events: our notices and handler failures only


API_VERSION = f"{crd.GROUP}/{crd.VERSION}"
LOGIN_RETRY = 5.0
"""Seconds between two logins while the API server refuses the credentials."""


@kopf.on.login()
async def login(settings: kopf.OperatorSettings, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account, else the kubeconfig, loaded by the ``kubernetes`` package;
    the children's client takes the same configuration and runs in kopf's executor.

    The credentials are tried once (:meth:`kube.Kube.served`) before kopf gets them: kopf drops
    credentials the API server refused and, given the same ones again, exits (``Ran out of
    valid credentials``), a crash loop that a token being issued or a binding being created
    would end anyway. Refused, the login is retried instead, and :func:`api_reachable` keeps
    the operator unready meanwhile. Any other failure (no answer) is kopf's to retry."""
    info = kopf.login_via_client(settings=settings, **kwargs)
    client = kube.connect(executor=settings.execution.executor)
    try:
        await client.served(API_VERSION)
    except kube.KubeError as error:
        if error.status == 401:
            raise kopf.TemporaryError(
                f"the Kubernetes API refuses the operator's credentials ({error})",
                delay=LOGIN_RETRY,
            ) from None
    return info


@kopf.on.probe(id="kubernetesApi")
async def api_reachable(**_: Any) -> str:
    """Readiness: ``/healthz`` (kopf's ``--liveness`` endpoint, which the chart's probes ask)
    runs the probes and answers 500 when one fails; without this one it answered 200 while the
    operator could not log in, or reach the API server at all. Ready means: the API server
    answers a discovery read of the EventBuilders' group with the operator's current
    credentials (kopf keeps a success for 10 s)."""
    try:
        await kube.current().served(API_VERSION)
    except kube.KubeError as error:
        raise kopf.PermanentError(f"cannot talk to the Kubernetes API: {error}") from None
    return "ok"


@kopf.on.cleanup()
def close_sessions(**_: Any) -> None:
    kube.disconnect()


# ----------------------------------------------------------------------------- lifecycle


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE)
async def reconcile(
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    labels: kopf.Labels,
    annotations: kopf.Annotations,
    status: kopf.Status,
    patch: kopf.Patch,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """Validate, build, adopt, create what is absent; the children are never replaced."""
    namespace = _namespaced(namespace)
    valid = _validate(spec, patch, status, _generation(body))
    children = _children(name, namespace, valid, dict(labels))
    kopf.adopt(children, owner=body)
    for child in children:
        try:
            created = await kube.current().create(child)
        except kube.KubeError as error:
            raise _kube_error(error) from None
        if created:
            logger.info("created %s %s", child["kind"], child["metadata"]["name"])
    endpoint = _endpoint(name, namespace, annotations)
    patch.status.update(
        evb_status.accepted(status, endpoint=endpoint, generation=_generation(body), now=_now())
    )


async def configure_live(
    *, param: str = "", reason: str, patch: kopf.Patch, logger: kopf.Logger, **kwargs: Any
) -> None:
    """Push one live parameter to the running orderer (``Configure``): no restart, no child
    touched. At creation the ConfigMap already holds it.

    Several orderers: ``Configure`` at every one. Should one fail, ``observedGeneration`` stays
    where it was (``reconcile``, which ran first in this round, moved it; this puts it back), so
    ``Ready`` says the spec is not acted on yet, and the handler is retried."""
    if reason == "create":
        return
    orderer = _orderer(**kwargs)
    if orderer.valid is None:
        return
    value = orderer.valid.orderer.to_mapping(camel=True)[param]
    if param == "barrierTimeout" and value is None:  # unset: back to 4 x buildWindow, now
        value = orderer.valid.orderer.effective_barrier_timeout
    if orderer.several:
        outcomes = await control.configure_each(
            orderer.endpoints,
            {param: value},
            security=await _reach(orderer),
            timeout=CONTROL_TIMEOUT,
        )
        configs = [o.value for o in outcomes if o.value is not None]
        if configs:
            patch.status["window"] = float(configs[0].build_window)
        if control.failures(outcomes):
            patch.status["observedGeneration"] = kwargs["status"].get("observedGeneration")
        _failed(f"{param}={value!r} configured", outcomes)
        logger.info("configured %s=%r live at %d orderers", param, value, len(outcomes))
        return
    config = await _control(orderer_client.configure_async, orderer, {param: value})
    logger.info("configured %s=%r live at %s", param, value, orderer.endpoint)
    patch.status["window"] = float(config.build_window)


for _name in LIVE_PARAMETERS:  # one handler per live parameter, each on its own spec field
    kopf.on.field(*RESOURCE, field=f"spec.{camel_case(_name)}", param=camel_case(_name))(
        configure_live
    )


async def _reapply(
    child: specs_common.ChildKind,
    path: str,
    *,
    reason: str,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    labels: kopf.Labels,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """The one skeleton of the field handlers below: validate -> rebuild -> patch -> translate.

    The live ``child``'s ``path`` (``/spec``, ``/spec/template``) becomes the rebuilt one's; a
    child the spec no longer asks for (no ``spec.spark``, a disabled NetworkPolicy) is deleted.
    Nothing at creation (``reconcile`` creates the children), nothing for an invalid spec (the
    create/update handler reports it)."""
    namespace = _namespaced(namespace)
    if reason == "create":
        return
    valid = _valid_or_none(spec)
    if valid is None:
        return
    wanted = _child(_children(name, namespace, valid, dict(labels)), child, name)
    try:
        if wanted is None:
            await kube.current().delete(child.api_version, child.kind, namespace, child.name(name))
            return
        value: Any = wanted
        for key in path.strip("/").split("/"):
            value = value[key]
        await kube.current().patch(
            child.api_version,
            child.kind,
            namespace,
            child.name(name),
            [{"op": "replace", "path": path, "value": value}],
        )
    except kube.KubeError as error:
        raise _kube_error(error) from None
    logger.info("patched %s of %s %s", path, child.kind, child.name(name))


@kopf.on.field(*RESOURCE, field="spec.orderer")
@kopf.on.field(*RESOURCE, field="spec.tls")
@kopf.on.field(*RESOURCE, field="spec.auth")
async def roll_orderer(**kwargs: Any) -> None:
    """Image, resources, service settings, TLS or token changed: a new pod template (rolls the
    pods), and the forwarders' and the release's (they run the orderer's image with its
    credentials). The Spark job's mounts follow with its next spec change."""
    await _reapply(specs_common.STATEFULSET, "/spec/template", **kwargs)
    if kwargs["spec"].get("upstreams"):  # none: there is no Deployment to roll (nor to delete)
        await _reapply(specs_common.FORWARD, "/spec", **kwargs)
    valid = _valid_or_none(kwargs["spec"])
    if valid is not None and valid.orderers > 1:  # one orderer: no release
        await _reapply(specs_common.RELEASE, "/spec/template", **kwargs)


@kopf.on.field(*RESOURCE, field="spec.upstreams")
async def update_upstreams(old: Any, **kwargs: Any) -> None:
    """Upstreams changed: patch the forwarders' Deployment (rolls them: each resumes from its
    committed offset upstream); none left: delete it. The first upstreams: ``reconcile``
    creates it."""
    if old is None:
        return
    await _reapply(specs_common.FORWARD, "/spec", **kwargs)


def _run_number(value: Any) -> int:
    """``spec.run`` as kopf's old or new value: unset is the default, 1."""
    return 1 if value is None else int(value)


@kopf.on.field(*RESOURCE, field="spec.run")
async def begin_run(
    old: Any,
    new: Any,
    reason: str,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    """``spec.run`` raised: end the current run if it has not ended (``EndRun`` drains every
    queue), then ``BeginRun`` with the new number. Lowered, or raised once ``state`` is Ended:
    refused (the API server's CEL rules refuse it first; this holds where none did).

    Safe to retry: an orderer already at that run (or past it) is left alone, so a retry after
    ``BeginRun`` answered, or a run begun by hand (``evb begin-run``), begins nothing twice. At
    creation the orderer starts with the number (its ConfigMap)."""
    if reason == "create":
        return
    before, after = _run_number(old), _run_number(new)
    if after <= before:
        if after < before:
            raise kopf.PermanentError(
                f"spec.run: cannot be lowered from {before} to {after}: run numbers increase"
                " from run to run"
            )
        return
    orderer = _orderer(**kwargs)
    if orderer.valid is None:
        return
    if orderer.valid.spec["state"] == RunPhase.ENDED:
        raise kopf.PermanentError(
            f"spec.run: run {after} not begun: this EventBuilder ended (spec.state Ended)"
            " and begins no more runs; create a new EventBuilder"
        )
    if orderer.several:
        await _begin_each(orderer, after, body, patch, logger)
        return
    stats = await _control(orderer_client.get_stats_async, orderer)
    if stats.run >= after:
        logger.info("the orderer at %s is at run %s already", orderer.endpoint, stats.run)
        return
    if not stats.run_ended:
        last = await _control(orderer_client.end_run_async, orderer)
        logger.info("ended run %s at %s: %d fragments in order", stats.run, orderer.endpoint, last)
    begun = await _control(orderer_client.begin_run_async, orderer, after)
    logger.info("began run %d at output offset %d", begun.run, begun.start_offset)
    patch.status.update(
        evb_status.begun(begun.run, begun.start_offset, generation=_generation(body))
    )


async def _begin_each(
    orderer: _Orderer, run: int, body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger
) -> None:
    """``BeginRun`` of ``run`` at every orderer of the run that is below it
    (:func:`control.begin_each`); the run's first offset in the status is the sum of the
    orderers' (the length of all their ordered logs before it)."""
    outcomes = await control.begin_each(
        orderer.endpoints, run, security=await _reach(orderer), timeout=CONTROL_TIMEOUT
    )
    for o in outcomes:
        if o.value is not None and not o.done_before:
            logger.info(
                "began run %d at orderer %d, output offset %d", run, o.index, o.value.start_offset
            )
    _failed(f"run {run} begun", outcomes)
    start = sum(o.value.start_offset for o in outcomes if o.value is not None)
    patch.status.update(evb_status.begun(run, start, generation=_generation(body)))


@kopf.on.field(*RESOURCE, field="spec.spark")
async def update_spark(old: Any, new: Any, **kwargs: Any) -> None:
    """The Spark section changed: patch the SparkApplication (created by ``reconcile`` when the
    section appears; deleted when it goes), and the live page's Service likewise (``ui``: a
    new port patched into it, created by ``reconcile`` when set, deleted when unset or when the
    section goes). Another event building at the same output.path (the page set or unset
    among it) is refused, the SparkApplication untouched: the job would resume its checkpoint
    and refuse it (the API server's CEL rule refuses it first; this holds where none did)."""
    if old is None:
        return
    try:
        validation.validate_change({"spark": old}, {"spark": new})
    except validation.InvalidSpec as error:
        raise kopf.PermanentError(f"SparkApplication not changed: {error}") from None
    await _reapply(specs_common.SPARKAPPLICATION, "/spec", **kwargs)
    if _has_page(old) or _has_page(new):  # none before or after: no Service to touch
        await _reapply(specs_common.LIVE, "/spec/ports", **kwargs)


def _has_page(spark: Any) -> bool:
    """Whether a Spark section (kopf's old or new value) asks for the live page."""
    return isinstance(spark, Mapping) and spark.get("ui") is not None


@kopf.on.field(*RESOURCE, field="spec.networkPolicy")
async def update_network_policy(**kwargs: Any) -> None:
    """Enabled: patch its rules (``reconcile`` creates it); disabled: delete it."""
    await _reapply(specs_common.NETWORKPOLICY, "/spec", **kwargs)


@kopf.on.field(*RESOURCE, field="spec.state")
async def end_run(
    new: Any,
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    """``state: Ended``: the orderer's end of run (drain every queue); the Spark job then reads
    to the last offset and finishes. A run over several orderers: the release's Deployment goes
    to 0 replicas (no run begins again; ``specs_release.build_release_spec`` says why)."""
    if new != RunPhase.ENDED:
        return
    orderer = _orderer(**kwargs)
    if orderer.several:
        outcomes = await control.end_each(
            orderer.endpoints, security=await _reach(orderer), timeout=CONTROL_TIMEOUT
        )
        for o in outcomes:
            if o.value is not None and not o.done_before:
                logger.info("ended the run at orderer %d: %d fragments in order", o.index, o.value)
        _failed("the run ended", outcomes)
        last = sum(o.value for o in outcomes if o.value is not None)
    else:
        last = await _control(orderer_client.end_run_async, orderer)
        logger.info("ended the run at %s: %d fragments in order", orderer.endpoint, last)
    patch.status.update(
        evb_status.ended(status, offset=last, generation=_generation(body), now=_now())
    )
    if orderer.valid is not None and orderer.valid.orderers > 1:
        await _reapply(specs_common.RELEASE, "/spec/replicas", logger=logger, **kwargs)


@kopf.timer(*RESOURCE, interval=STATS_INTERVAL, initial_delay=min(STATS_INTERVAL, 2.0))
async def refresh_status(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, logger: kopf.Logger, **kwargs: Any
) -> None:
    """Status from ``GetStats``, the orderer's StatefulSet (its pod ready?) and the
    SparkApplication, and where the live page is; Events for what needs attention."""
    orderer = _orderer(**kwargs)
    valid = orderer.valid
    if valid is None:
        return
    stats: Stats | None = None
    error: str | None = None
    answers: list[evb_status.OrdererAnswer] = []
    try:
        reach = await _security(valid, orderer.namespace)
        if orderer.several:
            answers = await control.stats_each(
                orderer.endpoints,
                security=reach,
                timeout=RPC_TIMEOUT,
                barrier_log_limit=BARRIER_LOG_LIMIT,
            )
        else:
            stats = await orderer_client.get_stats_async(
                orderer.endpoint,
                barrier_log_limit=BARRIER_LOG_LIMIT,
                timeout=RPC_TIMEOUT,
                security=reach,
            )
    except EvbError as failure:
        error = str(failure)
        answers = [
            evb_status.OrdererAnswer(k, e, None, error) for k, e in enumerate(orderer.endpoints)
        ]
    children: dict[str, dict[str, Any] | None] = {}
    read = [specs_common.STATEFULSET]
    if valid.has_spark:
        read.append(specs_common.SPARKAPPLICATION)
    for child in read:
        try:
            children[child.kind] = await kube.current().get(
                child.api_version, child.kind, orderer.namespace, child.name(orderer.owner)
            )
        except kube.KubeError as failure:
            logger.warning("cannot read the %s: %s", child.kind, failure)
    spark = children.get(specs_common.SPARKAPPLICATION.kind)
    statefulset = children.get(specs_common.STATEFULSET.kind)
    page = specs_live.page_address(orderer.owner, orderer.namespace, valid.spec.get("spark"))
    if orderer.several:
        new, notices = evb_status.observe_orderers(
            status,
            valid=valid,
            endpoint=orderer.endpoint,
            answers=answers,
            spark=spark,
            statefulset=statefulset,
            generation=_generation(body),
            now=_now(),
            page=page,
        )
    else:
        new, notices = evb_status.observe(
            status,
            valid=valid,
            endpoint=orderer.endpoint,
            stats=stats,
            error=error,
            spark=spark,
            statefulset=statefulset,
            generation=_generation(body),
            now=_now(),
            page=page,
        )
    patch.status.update(new)
    for notice in notices:
        kopf.event(body, type=notice.type, reason=notice.reason, message=notice.message)


@kopf.on.delete(*RESOURCE, retries=5, backoff=5)
async def delete_children(
    spec: kopf.Spec, name: str, namespace: str | None, logger: kopf.Logger, **_: Any
) -> None:
    """The Spark job first (it stops reading) and its live page's Service, then the orderer and
    its configuration."""
    namespace = _namespaced(namespace)
    for child in specs_common.DELETION_ORDER:
        try:
            if await kube.current().delete(
                child.api_version, child.kind, namespace, child.name(name)
            ):
                logger.info("deleted %s %s", child.kind, child.name(name))
        except kube.KubeError as error:
            raise _kube_error(error) from None
