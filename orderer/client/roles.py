"""Whether orderers are one run's, in the order given (docs/scale-out.md): the one rule that the
sources' client, the Spark job, ``evb stats``/``evb top`` and the run's control commands apply
to the roles the orderers' ``GetStats`` answers.

Why one rule: a list in another order would send each slice to the wrong orderer (refused by
each with INVALID_ARGUMENT, but only once data flows) and merge the pieces in the wrong order;
orderers of different slice lengths are not one run at all. Every entry point refuses these
before anything is sent, in the same words, naming the first target out of place.
"""

from __future__ import annotations

from collections.abc import Sequence

from orderer.errors import InterfaceError
from orderer.stats import SliceRole

__all__ = ["check_roles", "misplaced", "peers_of"]


def misplaced(role: SliceRole, index: int, orderers: int, slice_ticks: int | None) -> str | None:
    """Why an orderer answering ``role`` is not orderer ``index`` of ``orderers`` cutting slices
    of ``slice_ticks`` (orderer 0's), or None when it is. The reason reads after the target's
    address (``127.0.0.1:51001 is orderer 2 of 3, not ...``)."""
    if role.orderers != orderers or role.index != index:
        return (
            f"is orderer {role.index} of {role.orderers}, not orderer {index} of {orderers}: "
            "give the run's orderers in their order"
        )
    if role.slice_ticks != slice_ticks:
        return (
            f"cuts slices of {role.slice_ticks} ticks, orderer 0 of {slice_ticks}: they are not "
            "one run's orderers"
        )
    return None


def check_roles(targets: Sequence[str], roles: Sequence[SliceRole]) -> None:
    """Target ``k`` answered ``roles[k]``: each must be orderer ``k`` of ``len(targets)``, all
    with orderer 0's slice length (``InterfaceError`` naming the first that is not)."""
    ticks = roles[0].slice_ticks if roles else None
    for k, (target, role) in enumerate(zip(targets, roles, strict=True)):
        why = misplaced(role, k, len(targets), ticks)
        if why is not None:
            raise InterfaceError(f"target: {target} {why}")


def peers_of(target: str, role: SliceRole) -> list[str] | None:
    """The run's orderers that one address stands for: None for a plain orderer (a run of
    one), its ``peers`` for an orderer of a run over several started with ``--peers``;
    ``InterfaceError`` for one started without them (it cannot stand for the run)."""
    if not role.sliced:
        return None
    if len(role.peers) != role.orderers:
        raise InterfaceError(
            f"target: {target} is orderer {role.index} of {role.orderers} and does not name the "
            "others (evb serve --peers): give every orderer's address, in their order "
            "(--target a:50051,b:50051,...)"
        )
    return list(role.peers)
