"""The handlers of an EventBuilder's children: create them (:func:`reconcile`), follow a change
of the spec's sections into them, and delete them.

The handlers of the children's sections (``spec.orderer``/``tls``/``auth``, ``spec.upstreams``,
``spec.spark``, ``spec.networkPolicy``) are one skeleton, :func:`reapply`: validate, rebuild,
patch (or delete), translate the errors. The children are built by :mod:`evb_operator.specs`;
nothing here builds a manifest. Registered with kopf by
:mod:`evb_operator.handlers.registrations`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from evb_operator import kube, validation
from evb_operator import status as evb_status
from evb_operator.handlers import common
from evb_operator.specs import common as specs_common

__all__ = [
    "delete_children",
    "reapply",
    "reconcile",
    "roll_orderer",
    "update_network_policy",
    "update_spark",
    "update_upstreams",
]


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
    namespace = common.namespaced(namespace)
    valid = common.validate(spec, patch, status, common.generation(body))
    children = common.build_children(name, namespace, valid, dict(labels))
    kopf.adopt(children, owner=body)
    for child in children:
        try:
            created = await kube.current().create(child)
        except kube.KubeError as error:
            raise common.kube_error(error) from None
        if created:
            logger.info("created %s %s", child["kind"], child["metadata"]["name"])
    endpoint = common.endpoint(name, namespace, annotations)
    patch.status.update(
        evb_status.accepted(
            status, endpoint=endpoint, generation=common.generation(body), now=common.now()
        )
    )


async def reapply(
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
    namespace = common.namespaced(namespace)
    if reason == "create":
        return
    valid = common.valid_or_none(spec)
    if valid is None:
        return
    built = common.build_children(name, namespace, valid, dict(labels))
    wanted = common.find_child(built, child, name)
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
        raise common.kube_error(error) from None
    logger.info("patched %s of %s %s", path, child.kind, child.name(name))


async def roll_orderer(**kwargs: Any) -> None:
    """Image, resources, service settings, TLS or token changed: a new pod template (rolls the
    pods), and the forwarders' and the release's (they run the orderer's image with its
    credentials). The Spark job's mounts follow with its next spec change."""
    await reapply(specs_common.STATEFULSET, "/spec/template", **kwargs)
    valid = common.valid_or_none(kwargs["spec"])
    if valid is None:  # reported by the create/update handler; nothing to rebuild
        return
    if valid.upstreams:  # none: there is no Deployment to roll (nor to delete)
        await reapply(specs_common.FORWARD, "/spec", **kwargs)
    if valid.orderers > 1:  # one orderer: no release
        await reapply(specs_common.RELEASE, "/spec/template", **kwargs)


async def update_upstreams(old: Any, **kwargs: Any) -> None:
    """Upstreams changed: patch the forwarders' Deployment (rolls them: each resumes from its
    committed offset upstream); none left: delete it. The first upstreams: ``reconcile``
    creates it."""
    if old is None:
        return
    await reapply(specs_common.FORWARD, "/spec", **kwargs)


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
    await reapply(specs_common.SPARKAPPLICATION, "/spec", **kwargs)
    if _has_page(old) or _has_page(new):  # none before or after: no Service to touch
        await reapply(specs_common.LIVE, "/spec/ports", **kwargs)


def _has_page(spark: Any) -> bool:
    """Whether a Spark section (kopf's old or new value, raw: the old one was never validated
    here) asks for the live page."""
    return isinstance(spark, Mapping) and spark.get("ui") is not None


async def update_network_policy(**kwargs: Any) -> None:
    """Enabled: patch its rules (``reconcile`` creates it); disabled: delete it."""
    await reapply(specs_common.NETWORKPOLICY, "/spec", **kwargs)


async def delete_children(
    spec: kopf.Spec, name: str, namespace: str | None, logger: kopf.Logger, **_: Any
) -> None:
    """The Spark job first (it stops reading) and its live page's Service, then the orderer and
    its configuration."""
    namespace = common.namespaced(namespace)
    for child in specs_common.DELETION_ORDER:
        try:
            if await kube.current().delete(
                child.api_version, child.kind, namespace, child.name(name)
            ):
                logger.info("deleted %s %s", child.kind, child.name(name))
        except kube.KubeError as error:
            raise common.kube_error(error) from None
