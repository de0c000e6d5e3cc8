"""Repository-wide pytest setup.

Triton runs in its interpreter on machines without a GPU; the switch must be
set before triton is first imported, so it is set here, first of all.

``CONVEYOR_TEST_DEVICE=cuda`` runs the suite with that default device
(``torch.set_default_device``): tensors the tests make land on the GPU, and
the triton backend compiles real kernels (set ``TRITON_INTERPRET=0`` too).
This is how the suite is run on a GPU machine; CI has none.

Tests marked ``@pytest.mark.slow`` run only with ``--runslow`` (``nox`` passes
it; the README's plain ``python -m pytest``, which CI runs, skips them), so
that CI runs a representative part well inside its time budget.
"""

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a long test; runs only with --runslow (nox passes it)")
    device = os.environ.get("CONVEYOR_TEST_DEVICE")
    if device:
        import torch

        torch.set_default_device(device)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow (nox does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
