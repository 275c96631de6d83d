"""The package under test is this source tree's (python/wan22vae), not an installed copy; the library comes from
$W22_LIB or the package's own lookup (installed copy, then the repo's build/)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
