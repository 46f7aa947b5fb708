"""The exception types for user mistakes: the CLI prints their message on one line and exits with code 2."""


class UserError(Exception):
    """A mistake in what the user asked for (config, field, value, name). The message names the field."""


class ResourceError(UserError):
    """A size that does not fit this machine: the message gives the estimate, what is available and how to
    override the check."""
