"""`python -m include.cli`: the `lakehouse` command line."""

import sys

from include.cli import main

sys.exit(main())
