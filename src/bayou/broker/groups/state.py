"""The consumer-group state table: every state, every event and every transition, in one place.

bayou assigns partitions on the broker as soon as membership changes (an eager rebalance with a
server-side assignor), so there is no join barrier. A rebalance is "completing" from the moment a
new assignment is computed until every member has confirmed the new generation (SYNC or a
heartbeat at that generation); then the group is stable.
"""

from __future__ import annotations

import enum


class GroupState(enum.Enum):
    EMPTY = "Empty"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupEvent(enum.Enum):
    MEMBERSHIP_CHANGED = "membership_changed"  # join, leave or expiry with members remaining
    LAST_MEMBER_GONE = "last_member_gone"
    ALL_CONFIRMED = "all_confirmed"
    DELETED = "deleted"


S, E = GroupState, GroupEvent

TRANSITIONS: dict[tuple[GroupState, GroupEvent], GroupState] = {
    (S.EMPTY, E.MEMBERSHIP_CHANGED): S.COMPLETING_REBALANCE,
    (S.EMPTY, E.LAST_MEMBER_GONE): S.EMPTY,
    (S.EMPTY, E.DELETED): S.DEAD,
    (S.COMPLETING_REBALANCE, E.MEMBERSHIP_CHANGED): S.COMPLETING_REBALANCE,
    (S.COMPLETING_REBALANCE, E.ALL_CONFIRMED): S.STABLE,
    (S.COMPLETING_REBALANCE, E.LAST_MEMBER_GONE): S.EMPTY,
    (S.COMPLETING_REBALANCE, E.DELETED): S.DEAD,
    (S.STABLE, E.MEMBERSHIP_CHANGED): S.COMPLETING_REBALANCE,
    (S.STABLE, E.ALL_CONFIRMED): S.STABLE,
    (S.STABLE, E.LAST_MEMBER_GONE): S.EMPTY,
    (S.STABLE, E.DELETED): S.DEAD,
}


class IllegalTransition(RuntimeError):
    pass


def transition(state: GroupState, event: GroupEvent) -> GroupState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"{event.value} is not allowed in state {state.value}") from None
