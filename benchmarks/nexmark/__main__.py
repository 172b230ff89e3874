"""``python -m benchmarks.nexmark``: the command (``_cli.py``)."""

import sys

from benchmarks.nexmark._cli import main

sys.exit(main())
