"""``python -m app.cli``: the same as the ``kafka-health`` command."""

import sys

from app.cli.main import main

sys.exit(main())
