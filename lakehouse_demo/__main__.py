"""``python -m lakehouse_demo``: see :mod:`lakehouse_demo.cli`."""

from __future__ import annotations

import sys

from lakehouse_demo.cli import main

sys.exit(main())
