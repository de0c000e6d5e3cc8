"""The switch for the rebuild-and-compare check after every in-place update.

``CONVEYOR_ALIAS_DB_VERIFY=1`` in the environment turns it on for every
``AliasDb`` built afterwards (the package's tests set it); ``from_graph(...,
verify_updates=True)`` turns it on for one. It makes every update cost a full
rebuild, so it is for tests and debugging only.
"""

from __future__ import annotations

import os

ENV_VAR = "CONVEYOR_ALIAS_DB_VERIFY"


def verify_updates_default() -> bool:
    """Whether ``CONVEYOR_ALIAS_DB_VERIFY`` asks for the check (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(ENV_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


class AliasDbMismatch(AssertionError):
    """The analysis updated in place differs from one rebuilt from scratch."""
