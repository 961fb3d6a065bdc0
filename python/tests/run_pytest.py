"""Run the rgaps pytest suite for `meson test --suite python`.

Exits 77 (skipped, with the reason) where pytest is not installed, so that
the suite never passes silently without running.
"""
import sys

try:
    import pytest
except ImportError:
    print("SKIP: pytest is not installed (Debian: apt-get install python3-pytest)")
    sys.exit(77)

rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *sys.argv[1:]])
sys.exit(77 if rc == pytest.ExitCode.NO_TESTS_COLLECTED else int(rc))
