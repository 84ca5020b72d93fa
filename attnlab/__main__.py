"""`python -m attnlab` (what `torchrun -m attnlab train ...` runs)."""

import sys

from attnlab.cli import main

sys.exit(main())
