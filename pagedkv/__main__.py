"""``python -m pagedkv`` runs the command line."""

import sys

from pagedkv.entrypoints.cli import main

sys.exit(main())
