"""The published tables as a list of changes, each emitted once (pure: rows in, changes out).

A change has a *key* that names it for good (the ledger records keys), the instant it happened
(``valid_from``, ``deleted_at``, or the first sighting of a group on an incarnation: never the
time of emission) and the dataset it is about. Sorting by :func:`order` puts one dataset's
changes in the order they happened.

=================  ==========================  =================================================
change             from                        key
=================  ==========================  =================================================
CREATE             version 1 (``created``),    ``<cluster>/<incarnation>/v<version>``
                   a ``reappeared`` version
ALTER              ``attributes_changed``,     ``<cluster>/<incarnation>/v<version>``
                   ``id_assigned``
RENAME             ``renamed`` (previous       ``<cluster>/<incarnation>/v<version>``
                   name from the version
                   before)
DROP               ``deleted_at``              ``<cluster>/<incarnation>/drop``
READ               a ``group_incarnations``    ``<cluster>/<incarnation>/group/<group>``, with
                   row                         ``/carried`` when its position was carried (R9):
                                               a carried position found later is a new change
=================  ==========================  =================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from topic_lineage import tables as t

CREATE, ALTER, RENAME, DROP, READ = "CREATE", "ALTER", "RENAME", "DROP", "READ"
_RANK = {DROP: 0, CREATE: 1, ALTER: 2, RENAME: 2, READ: 3}
_KIND_OF = {"created": CREATE, "reappeared": CREATE, "attributes_changed": ALTER,
            "id_assigned": ALTER, "renamed": RENAME}


@dataclass(frozen=True)
class Change:
    key: str
    kind: str
    at: datetime
    namespace: str
    name: str
    row: dict
    """The ``topic_incarnations`` row (version) the change is about."""
    previous_name: str | None = None
    group: dict | None = None
    """The ``group_incarnations`` row of a READ."""

    @property
    def dataset(self) -> tuple[str, str]:
        return self.namespace, self.name


def order(change: Change) -> tuple:
    """Event time first. One incarnation's changes have distinct times (create, alterations and
    renames at their versions' ``valid_from``, reads after the version they read opened, the drop
    after all); at one instant a drop comes first, so a re-created name is dropped, then created."""
    return change.at, _RANK[change.kind], change.key


def topic_changes(rows: Iterable[dict], namespace: Callable[[str, str], str]) -> list[Change]:
    """One change per version of every incarnation, and a DROP for every deleted one."""
    by_incarnation: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        by_incarnation.setdefault((row[t.CLUSTER_ID], row[t.INCARNATION_KEY]), []).append(row)
    changes = []
    for (cluster, key), versions in by_incarnation.items():
        versions.sort(key=lambda r: r[t.VERSION])
        ns = namespace(cluster, versions[0][t.CLUSTER_ALIAS])
        base = f"{cluster}/{key}"
        previous = None
        for row in versions:
            kind = _KIND_OF.get(row[t.CHANGE_TYPE], ALTER)
            renamed_from = previous[t.TOPIC_NAME] if previous and kind == RENAME else None
            changes.append(Change(f"{base}/v{row[t.VERSION]}", kind, row[t.VALID_FROM], ns,
                                  row[t.TOPIC_NAME], row, previous_name=renamed_from))
            previous = row
        last = versions[-1]
        if last[t.DELETED_AT] is not None:
            changes.append(Change(f"{base}/drop", DROP, last[t.DELETED_AT], ns,
                                  last[t.TOPIC_NAME], last))
    return changes


def group_changes(rows: Iterable[dict], incarnation_rows: Iterable[dict],
                  namespace: Callable[[str, str], str]) -> list[Change]:
    """One READ per group and incarnation it committed on (a second one once its position is
    found carried); the dataset is the version live when the group was first seen on it."""
    versions: dict[tuple[str, str], list[dict]] = {}
    for row in incarnation_rows:
        versions.setdefault((row[t.CLUSTER_ID], row[t.INCARNATION_KEY]), []).append(row)
    for rows_of in versions.values():
        rows_of.sort(key=lambda r: r[t.VERSION])
    changes = []
    for group in rows:
        cluster, key = group[t.CLUSTER_ID], group[t.INCARNATION_KEY]
        known = versions.get((cluster, key))
        if not known:
            continue  # R8 attributes offsets only to incarnations of the same version
        first_seen = group[t.FIRST_SEEN_AT]
        live = [r for r in known if r[t.VALID_FROM] <= first_seen]
        row = live[-1] if live else known[0]
        carried = "/carried" if group[t.CARRIED_OFFSET] else ""
        changes.append(Change(
            f"{cluster}/{key}/group/{group[t.GROUP_ID]}{carried}", READ, first_seen,
            namespace(cluster, row[t.CLUSTER_ALIAS]), group[t.TOPIC_NAME], row, group=group,
        ))
    return changes
