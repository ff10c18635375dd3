"""The base of every error a user can act on.

The CLI prints these as one line (no traceback) and exits non-zero; anything else is a bug and
keeps its traceback.
"""


class TopicLineageError(Exception):
    """An error whose message says what failed, on which input, and what to do."""

    exit_code = 2


class WarehouseError(TopicLineageError):
    """A version could not be published or read; nothing published was changed."""
