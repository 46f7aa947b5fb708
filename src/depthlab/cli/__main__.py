"""``python -m depthlab.cli``: the ``depthlab`` command."""

from depthlab.cli import main

main()
