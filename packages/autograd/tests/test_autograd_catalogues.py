"""The functionalize and synthetic_base catalogues with requires_grad, through
the full pipeline: the checker's gradient comparison, with respect to the
leaves behind the inputs.

Note [Zero gradients]: ``x.zero_(); return y + 1`` gives ``x``'s leaf no
gradient in eager (the loss never reaches it), and compiled as well since
Note [Outputs no loss reaches]. The checker counts no gradient and an
all-zero one as the same (here AOTAutograd gives zeros).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from autograd_helpers import pipeline
from conveyor.testing import check

PACKAGES = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str) -> ModuleType | None:
    if not path.exists():
        return None
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


functionalize_catalogue = _load(PACKAGES / "functionalize/tests/functionalize_catalogue.py", "functionalize_catalogue")
functionalize_tests = _load(PACKAGES / "functionalize/tests/test_functionalize_catalogue.py", "autograd_functionalize_tests")
synthetic_base_cases = _load(PACKAGES / "synthetic_base/tests/test_synthetic_base_cases.py", "autograd_synthetic_base_cases")
synthetic_base_conftest = _load(PACKAGES / "synthetic_base/tests/conftest.py", "autograd_synthetic_base_conftest")


def _functionalize_params() -> list[Any]:
    if functionalize_catalogue is None or functionalize_tests is None:
        return []
    known = functionalize_tests.KNOWN_WRONG
    return [
        pytest.param(c, id=c.name, marks=[pytest.mark.xfail(strict=True, reason=known[c.name])] if c.name in known else [])
        for c in functionalize_catalogue.CASES
        if getattr(c, "grad_variant", getattr(c, "differentiable", True))  # eager has a backward for it
    ]


F_PARAMS = _functionalize_params()
S_CASES = synthetic_base_cases.CASES if synthetic_base_cases else []
#: synthetic_base cases the full pipeline gets wrong because of another stage
#: (their owners' lists, read as they are; strict: a fix or a regression shows)
S_KNOWN = {
    name: reason
    for (name, grad), reason in (synthetic_base_cases.KNOWN_INNER.items() if synthetic_base_cases else ())
    if grad and not reason.startswith("autograd:")
}


@pytest.mark.skipif(not F_PARAMS, reason="the functionalize catalogue is not in this checkout")
@pytest.mark.parametrize("case", F_PARAMS)
def test_functionalize_catalogue(case: Any) -> None:
    compile_with = pipeline("min_cut")
    check(case.fn, *case.inputs(case.leaves(True)), compile=compile_with)


@pytest.mark.skipif(not S_CASES, reason="the synthetic_base cases are not in this checkout")
@pytest.mark.parametrize("case", S_CASES, ids=[c.name for c in S_CASES])
def test_synthetic_base_catalogue(case: Any, request: pytest.FixtureRequest) -> None:
    if case.name in S_KNOWN:
        request.applymarker(pytest.mark.xfail(reason=S_KNOWN[case.name], strict=True))
    compile = pipeline("min_cut")
    synthetic_base_conftest.check_aliased(case.program, case.make_inputs, case.shape, True, compile)
