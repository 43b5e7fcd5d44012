# SPDX-License-Identifier: MIT
"""python3 -m cairn.worker (cairn/_cli.py)."""
import sys

from cairn._cli import main

sys.exit(main())
