"""``python -m dsclean``: same as the ``dsclean`` command."""
import sys

from .cli import main

sys.exit(main())
