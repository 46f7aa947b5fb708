"""The store's one error type (a :class:`depthlab.errors.UserError`, so the CLI shows it as one line)."""

from __future__ import annotations

from depthlab.errors import UserError


class StoreError(UserError):
    """A problem with the experiment store the user can fix (newer schema, not a store, unknown run)."""
