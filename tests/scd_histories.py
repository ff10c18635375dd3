"""Random cluster histories for the property tests (tests/test_scd_properties.py, tests/test_scd_walk.py).

A true world evolves step by step and is observed in many ways: late, duplicated and
out-of-order snapshots, incomplete snapshots, describe errors, broken near-empty listings (held)
and real mass deletions (confirmed), names re-created during a hold, ID-less topics gaining IDs,
reappearing IDs and shared IDs.
"""

from __future__ import annotations

from hypothesis import strategies as st
from scd_support import snap, tid, topic

from topic_lineage.scd.hold import HoldPolicy

# Small thresholds so that histories of a few topics are held often; both are configurable.
POLICY = HoldPolicy(ratio=0.5, min_count=2)
NAMES = "abcdef"
CLUSTERS_PER_EXAMPLE = 8


def _cluster_id(n: int) -> str:
    return f"Q2x1c3Rlci{n:02d}AAAAAAAAAA"[:22]


@st.composite
def cluster_history(draw, cluster: str):
    """Snapshots of one cluster: a true world evolving step by step, observed in many ways."""
    next_id = iter(range(1, 190))
    world: dict[str, list] = {}  # name -> [topic_id or None, partitions]
    deleted: list[tuple[str, str]] = []  # (name, topic_id) once deleted
    for name in draw(st.sets(st.sampled_from(NAMES), min_size=2)):
        world[name] = [None if draw(st.integers(0, 4)) == 0 else tid(next(next_id)), 3]
    snapshots = []
    for hour in range(draw(st.integers(3, 7))):
        for _ in range(draw(st.integers(0, 2))):  # the world changes
            change = draw(st.sampled_from(["create", "delete", "recreate", "partitions", "assign",
                                           "resurrect"]))
            name = draw(st.sampled_from(NAMES))
            if change == "create" and name not in world:
                world[name] = [tid(next(next_id)), 3]
            elif change == "delete" and name in world:
                if world[name][0] is not None:
                    deleted.append((name, world[name][0]))
                del world[name]
            elif change == "recreate" and name in world:
                world[name] = [tid(next(next_id)), 3]
            elif change == "partitions" and name in world:
                world[name][1] += 1
            elif change == "assign" and name in world and world[name][0] is None:
                world[name][0] = tid(next(next_id))
            elif change == "resurrect" and deleted:  # KAFKA-19383: an old ID comes back
                old_name, old_id = draw(st.sampled_from(deleted))
                if old_name not in world:
                    world[old_name] = [old_id, 3]
        view = draw(st.sampled_from(["complete", "complete", "incomplete", "broken", "errors",
                                     "shared"]))
        names = sorted(world)
        if view == "incomplete":
            names = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
        elif view == "broken":  # a near-empty listing
            names = names[:draw(st.integers(0, 1))]
        topics = []
        for name in names:
            topic_id, partitions = world[name]
            if view in ("errors", "incomplete") and draw(st.integers(0, 2)) == 0:
                topics.append(topic(name, error="TOPIC_AUTHORIZATION_FAILED"))
            else:
                topics.append(topic(name, topic_id, partitions=partitions))
        if view == "errors" and deleted and draw(st.integers(0, 2)) == 0:
            # a topic caught mid-deletion (or hidden by an ACL): a describe error for a name
            # the world no longer has, which carries no identity (R2)
            gone = draw(st.sampled_from(sorted({n for n, _ in deleted} - set(world)) or ["z"]))
            topics.append(topic(gone, error="TOPIC_AUTHORIZATION_FAILED"))
        if view == "shared" and len(topics) >= 2 and topics[0].topic_id and topics[1].error is None:
            topics[1] = topic(topics[1].name, topics[0].topic_id)  # two names, one ID
        snapshots.append(snap(hour, *topics, complete=view != "incomplete", cluster=cluster,
                              alias=f"c{cluster[-2:]}"))
    return snapshots


@st.composite
def histories(draw):
    """Independent cluster histories, shuffled together with some snapshots repeated."""
    snapshots = []
    for n in range(CLUSTERS_PER_EXAMPLE):
        snapshots += draw(cluster_history(_cluster_id(n)))
    repeated = draw(st.lists(st.sampled_from(snapshots), max_size=4))
    order = draw(st.randoms(use_true_random=False))
    ingested = snapshots + repeated
    order.shuffle(ingested)
    return ingested
