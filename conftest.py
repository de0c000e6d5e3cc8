"""Repository-wide pytest setup.

Triton runs in its interpreter on machines without a GPU; the switch must be
set before triton is first imported, so it is set here, first of all.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
