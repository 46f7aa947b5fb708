"""The one exception type for user mistakes: the CLI prints its message on one line and exits with code 2."""


class UserError(Exception):
    """A mistake in what the user asked for (config, field, value, name). The message names the field."""
