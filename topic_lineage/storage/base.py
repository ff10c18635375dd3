"""The interface every home implements (:mod:`topic_lineage.storage`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from topic_lineage.location import LocationError

Name = Path | str
"""A file of a home: its home-relative name, or its path under :attr:`Home.root`."""


class Home(ABC):
    """A place topic-lineage keeps data (see the module docstring)."""

    root: Path
    """The directory this process reads and writes the home's files in."""
    url: str
    """The home's URL (``file:`` for a local directory)."""
    reader_grace: timedelta
    """How long a version out of use stays for readers this process cannot see (retention's
    default; ``$TOPIC_LINEAGE_READER_GRACE`` overrides it)."""
    stale_build: timedelta
    """How long a version still ``building`` must go unchanged before retention takes it for a
    killed build's (its default; ``$TOPIC_LINEAGE_STALE_BUILD`` overrides it)."""
    shared_catalog_required: bool
    """Whether the tables need a catalog every process can reach (an embedded catalog file in
    :attr:`root` would be this process's own)."""
    location: str
    """How ``$TOPIC_LINEAGE_HOME`` names the home: a path, or the URL."""
    kind: str
    """What keeps the files, for messages: ``local disk``, ``S3``, ``GCS``, ``Azure``."""
    connection_types: tuple[str, ...] | None
    """The Airflow connection types whose credentials reach the home (``object_store_conn_id``);
    None: it needs no credentials (any connection named is left unused)."""

    @contextmanager
    def private_working_copy(self) -> Iterator[None]:
        """For the duration, a working copy of this process's own (an Airflow task on a worker
        of its own: Kubernetes, Celery); nothing where :attr:`root` is the home itself."""
        yield

    # --- names -----------------------------------------------------------------------------
    def relative(self, name: Name) -> str:
        """The home-relative name of ``name`` (a path under :attr:`root`, or already a name)."""
        if isinstance(name, Path):
            return name.relative_to(self.root).as_posix() if name.is_absolute() else name.as_posix()
        return name.strip("/")

    def path(self, name: Name) -> Path:
        """The path under :attr:`root` of ``name``."""
        return self.root / self.relative(name) if self.relative(name) else self.root

    @abstractmethod
    def url_of(self, name: Name) -> str:
        """The URL of ``name``: a ``file:`` URL or the object's (how an Iceberg table names its
        data files)."""

    @abstractmethod
    def engine_name(self, name: Name) -> str:
        """How Spark and pyarrow name ``name``: a local path, or the object's URL (executors
        then read and write the store, no disk in common with the driver)."""

    @abstractmethod
    def from_engine_name(self, text: str) -> Path:
        """The path under :attr:`root` of a file an engine named (the inverse of
        :meth:`engine_name`)."""

    def name_of(self, engine_name: str) -> str:
        """The home-relative name of a file an engine named (:meth:`engine_name`, or its URL);
        :class:`LocationError` when it is not under this home."""
        try:
            return self.relative(self.from_engine_name(engine_name))
        except ValueError:
            raise LocationError(f"{engine_name} is not under {self.url}") from None

    # --- whole objects ---------------------------------------------------------------------
    @abstractmethod
    def exists(self, name: Name) -> bool: ...

    @abstractmethod
    def listing(self, directory: Name, *, hidden: bool = False) -> dict[str, tuple[int, int]]:
        """Every file under ``directory`` (recursively) as ``name under it -> (size, modified
        ns)``; names whose last part starts with ``.`` or ``_`` are left out unless ``hidden``."""

    def read_bytes(self, name: Name) -> bytes | None:
        """The whole of ``name`` as the home has it now; None when there is none."""
        found = self.fetch(name, refresh=True)
        try:
            return found.read_bytes() if found is not None else None
        except FileNotFoundError:
            return None

    @abstractmethod
    def write_parquet(self, name: Name, table) -> None:
        """Write a pyarrow table as the Parquet file ``name``, whole (a retried task's file
        replaces its earlier attempt's)."""

    def read_text(self, name: Name) -> str | None:
        data = self.read_bytes(name)
        return None if data is None else data.decode()

    @abstractmethod
    def write_bytes(self, name: Name, data: bytes | str) -> None:
        """Replace ``name`` with ``data`` whole: a reader sees the old content or the new, never
        a part."""

    @abstractmethod
    def create(self, name: Name, data: bytes | str) -> bool:
        """Write ``name`` only if no file has that name; False when one had. Of two processes
        creating one name, exactly one gets True, whatever their timing."""

    @abstractmethod
    def keep(self, stored: Name, target: Name) -> bool:
        """Make ``target`` hold what the file ``stored`` holds, without copying it where the
        home can. False: ``target`` now is that file (a hard link on a disk). True: ``target`` is
        a reference the caller records (readers resolve it to ``stored``; nothing is uploaded),
        and :attr:`root` holds it for this process where it holds ``stored``."""

    @abstractmethod
    def remove(self, names: Iterable[Name]) -> None:
        """Delete files (missing ones are no error)."""

    @abstractmethod
    def remove_tree(self, directory: Name, *, last: str | None = None, keep: Collection[str] = ()) -> None:
        """Delete every file under ``directory`` (hidden ones too) but those named in ``keep``
        (home-relative); ``last`` (a name under it) after all the others: a removal cut short
        leaves it, and so the sign that there is more."""

    # --- files of root ---------------------------------------------------------------------
    @abstractmethod
    def fetch(self, name: Name, *, refresh: bool = False) -> Path | None:
        """The path under :attr:`root` of ``name``, copied from the store when it is not there
        yet (``refresh``: copied again, for the few files that change); None when the home has
        no such file."""

    def fetch_all(self, names: Iterable[Name]) -> list[Path]:
        """:meth:`fetch` of many files; those the home lacks are left out."""
        return [found for name in names if (found := self.fetch(name)) is not None]

    @abstractmethod
    def push(self, name: Name, source: Path | None = None) -> None:
        """Make the file written at ``name``'s path (or ``source``) the home's, whole."""

    def push_all(self, names: Iterable[Name]) -> None:
        for name in names:
            self.push(name)

    @abstractmethod
    def push_dir(self, directory: Name, *, skip: Collection[str] = (), last: str | None = None) -> None:
        """Make every file written under :attr:`root`'s ``directory`` the home's, but those the
        home has there already, those named in ``skip`` and hidden ones; ``last`` (a name under
        it) after all the others, as the sign that the rest is there."""

    @abstractmethod
    def pull_tree(self, directory: Name) -> None:
        """Bring :attr:`root`'s ``directory`` in step with the home (files new or changed there
        fetched, files removed there removed here; what was written here and not pushed stays)."""

    @abstractmethod
    def push_tree(self, directory: Name) -> None:
        """Make what changed in :attr:`root`'s ``directory`` since it last agreed with the home
        the home's (new and rewritten files stored, removed ones removed)."""

    @abstractmethod
    def tree_index(self, directory: Name) -> dict[str, str] | None:
        """The files a directory kept in step names (name -> digest); None when it names none."""

    def local_copies(self, names: Iterable[str]) -> list[str]:
        """Local paths for files named by URL or path (for an engine that reads local files):
        a file of this home is fetched (once); a ``file:`` URL becomes its path; anything else
        stays as it is."""
        from urllib.parse import unquote, urlparse

        found, wanted = [], []
        for name in names:
            parsed = urlparse(name)
            if parsed.scheme in ("", "file"):
                found.append(unquote(parsed.path) if parsed.scheme else name)
            elif name.startswith(self.url + "/"):
                wanted.append(name[len(self.url) + 1:])
                found.append(str(self.path(wanted[-1])))
            else:
                found.append(name)
        self.fetch_all(wanted)
        return found

    # --- change tokens ---------------------------------------------------------------------
    @abstractmethod
    def change_token(self, directory: Name) -> dict[str, tuple[int, int]]:
        """What changes whenever anything under ``directory`` changes (written through this
        interface and followed by :meth:`changed`): compared, never read."""

    @abstractmethod
    def changed(self, directory: Name) -> None:
        """Tell readers of :meth:`change_token` that something under ``directory`` changed."""


