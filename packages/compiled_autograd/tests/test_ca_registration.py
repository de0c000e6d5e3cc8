"""Note [Registering without importing torch's dynamo]: loading this
package's plugin (as every pipeline build does) imports neither
``torch._dynamo`` nor triton, so the triton backend can still choose
Triton's interpreter on a machine without a GPU; the package's names are
imported on first use."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import sys
import conveyor_compiled_autograd.plugin
assert "torch._dynamo" not in sys.modules, "registration imported torch._dynamo"
assert "triton" not in sys.modules, "registration imported triton"
import conveyor_compiled_autograd as cca
assert callable(cca.enable)
print("ok")
"""


def test_registering_the_tool_imports_neither_dynamo_nor_triton() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_package_names_are_there_on_first_use() -> None:
    import conveyor_compiled_autograd as cca

    assert set(cca.__all__) <= set(dir(cca)) | set(cca._WHERE) | {"__version__"}
    for name in cca.__all__:
        assert getattr(cca, name) is not None
