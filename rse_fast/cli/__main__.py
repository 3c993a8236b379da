"""``python -m rse_fast.cli``: the same as the ``rse-fast`` script."""

import sys

from rse_fast.cli.main import main

sys.exit(main())
