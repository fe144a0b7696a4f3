"""Test helpers live next to the tests: make ``import browser_support`` work."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
