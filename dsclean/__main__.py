"""``python -m dsclean``: same as the ``dsclean`` command."""

from .cli import run

run()
