"""What every handler of :mod:`evb_operator.handlers` shares: the EventBuilders' resource, the
valid spec (or the Invalid status and a ``kopf.PermanentError``), the children built with the
operator's environment, the orderer of an EventBuilder and how to reach it (its addresses, the
Secrets of its TLS and token), and the translation of every error into kopf's, done here once:
an invalid spec becomes ``kopf.PermanentError`` (reported once, no retry loop); an unreachable
orderer or API server becomes ``kopf.TemporaryError(delay=...)``.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import kopf

from evb_operator import constants as c
from evb_operator import crd, kube, security, specs, validation
from evb_operator import status as evb_status
from evb_operator.handlers import control
from evb_operator.specs import common as specs_common
from orderer import client as orderer_client
from orderer.errors import ConfigError, EvbError, InterfaceError

__all__ = [
    "API_VERSION",
    "CONTROL_TIMEOUT",
    "RESOURCE",
    "RETRY_DELAY",
    "Orderer",
    "build_children",
    "call_orderer",
    "channel_security",
    "endpoint",
    "endpoints",
    "find_child",
    "generation",
    "kube_error",
    "namespaced",
    "now",
    "operator_labels",
    "orderer_error",
    "orderer_of",
    "raise_failures",
    "reach",
    "valid_or_none",
    "validate",
]

RESOURCE = (crd.GROUP, crd.VERSION, crd.PLURAL)
"""The EventBuilders, as kopf's handlers name the resource they serve."""
API_VERSION = f"{crd.GROUP}/{crd.VERSION}"
CONTROL_TIMEOUT = 30.0
"""Seconds a Configure or EndRun may take (EndRun drains every queue and syncs the logs)."""
RETRY_DELAY = 10.0

T = TypeVar("T")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def namespaced(namespace: str | None) -> str:
    """EventBuilders are namespaced: kopf's ``namespace`` is never None for them."""
    if namespace is None:
        raise kopf.PermanentError("an EventBuilder without a namespace")
    return namespace


def endpoint(name: str, namespace: str, annotations: Mapping[str, str]) -> str:
    override = annotations.get(c.ANNOTATION_ENDPOINT_OVERRIDE)
    if override and os.environ.get(c.ENV_ALLOW_ENDPOINT_OVERRIDE) == "1":
        return override
    return specs_common.orderer_endpoint(name, namespace)


def endpoints(
    name: str, namespace: str, annotations: Mapping[str, str], orderers: int
) -> tuple[str, ...]:
    """Each orderer's own address, in index order: the run's Service with one orderer; with
    several, pod k's name under the headless Service (``specs.common.orderer_peers``), or, where
    the operator allows the endpoint override (tests), the override's addresses, one per
    orderer, in index order (``127.0.0.1:5001,127.0.0.1:5002,...``)."""
    if orderers == 1:
        return (endpoint(name, namespace, annotations),)
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


def generation(body: Mapping[str, Any]) -> int | None:
    """``metadata.generation``: what ``observedGeneration`` reports as acted on or seen."""
    value = body.get("metadata", {}).get("generation")
    return None if value is None else int(value)


def validate(
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
                now=now(),
            )
        )
        raise kopf.PermanentError(f"invalid spec: {error}") from None


def valid_or_none(spec: Mapping[str, Any]) -> validation.ValidSpec | None:
    try:
        return validation.validate(spec)
    except validation.InvalidSpec:
        return None  # the create/update handler reports it


def kube_error(error: kube.KubeError) -> kopf.TemporaryError | kopf.PermanentError:
    if error.status == 422:  # the API server refuses an object we built: retrying cannot help
        return kopf.PermanentError(f"Kubernetes API: {error}")
    return kopf.TemporaryError(f"Kubernetes API: {error}", delay=RETRY_DELAY * 3)


def orderer_error(error: EvbError) -> kopf.TemporaryError | kopf.PermanentError:
    if isinstance(error, ConfigError | InterfaceError):
        return kopf.PermanentError(f"the orderer refused: {error}")
    return kopf.TemporaryError(f"orderer unreachable: {error}", delay=RETRY_DELAY)


def operator_labels() -> dict[str, str]:
    """``EVB_OPERATOR_POD_LABELS`` (``k=v,k=v``, set by the chart) as a mapping."""
    text = os.environ.get(c.ENV_OPERATOR_POD_LABELS, "")
    pairs = [item.split("=", 1) for item in text.split(",") if "=" in item]
    return {key.strip(): value.strip() for key, value in pairs}


def build_children(
    name: str, namespace: str, valid: validation.ValidSpec, labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Every child (:func:`evb_operator.specs.build_children`), with the images, the namespace
    and the labels of the operator's environment."""
    return specs.build_children(
        name,
        namespace,
        valid,
        orderer_image=os.environ.get(c.ENV_ORDERER_IMAGE, c.DEFAULT_ORDERER_IMAGE),
        spark_image=os.environ.get(c.ENV_SPARK_IMAGE, c.DEFAULT_SPARK_IMAGE),
        operator_namespace=os.environ.get(c.ENV_OPERATOR_NAMESPACE),
        operator_labels=operator_labels(),
        labels=labels,
    )


@dataclass(frozen=True)
class Orderer:
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
        """A run over several orderers: every call goes to each
        (:mod:`evb_operator.handlers.control`)."""
        return len(self.endpoints) > 1


def orderer_of(
    *,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    annotations: kopf.Annotations,
    **_: Any,
) -> Orderer:
    """From a handler's keyword arguments."""
    namespace = namespaced(namespace)
    valid = valid_or_none(spec)
    orderers = 1 if valid is None else valid.orderers
    return Orderer(
        name,
        namespace,
        endpoint(name, namespace, annotations),
        valid,
        endpoints(name, namespace, annotations, orderers),
    )


async def call_orderer(call: Callable[..., Awaitable[T]], orderer: Orderer, *args: Any) -> T:
    """``call`` (``Configure``, ``EndRun``) on the orderer, reached as its spec says
    (plaintext without a valid spec); its errors translated."""
    valid = orderer.valid
    try:
        secure = None if valid is None else await channel_security(valid, orderer.namespace)
        return await call(orderer.endpoint, *args, timeout=CONTROL_TIMEOUT, security=secure)
    except EvbError as error:
        raise orderer_error(error) from None


def raise_failures(what: str, outcomes: Sequence[control.Outcome[Any]]) -> None:
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


async def reach(orderer: Orderer) -> orderer_client.ChannelSecurity | None:
    """How to reach the orderers (:func:`channel_security`), a missing Secret translated."""
    if orderer.valid is None:
        return None
    try:
        return await channel_security(orderer.valid, orderer.namespace)
    except EvbError as error:
        raise orderer_error(error) from None


async def channel_security(
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


def find_child(
    children: list[dict[str, Any]], child: specs_common.ChildKind, owner: str
) -> dict[str, Any] | None:
    """The child of that kind and name among ``children`` (two share a kind: the Services of a
    run over several orderers, the forwarders' and the release's Deployments)."""
    name = child.name(owner)
    return next(
        (c for c in children if c["kind"] == child.kind and c["metadata"]["name"] == name), None
    )
