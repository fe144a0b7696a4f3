"""``python -m pagedkv`` runs the command line."""

import sys

from pagedkv.cli import main

sys.exit(main())
