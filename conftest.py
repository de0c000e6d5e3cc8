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
    # Note [Tests run once in CI]: CI runs the suite on two torches (.ci/run); a test of machinery
    # that is the same on every torch (the CLI, the pytest plugin, plugin isolation, the README's
    # blocks, the fuser's pinned groups, ahead-of-time PTX) is marked once, and the second run
    # leaves it out (-m "not once"); a plain pytest and nox run it
    config.addinivalue_line("markers", "once: runs on the first torch of CI only (Note [Tests run once in CI])")
    device = os.environ.get("CONVEYOR_TEST_DEVICE")
    if device:
        import torch

        torch.set_default_device(device)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        # pytest-xdist (-n): each worker process gets its share of the cores, as torch's own
        # intra-op pool would otherwise take every core in every worker
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


@pytest.hookimpl(trylast=True)  # after the test's fixtures are torn down (monkeypatches undone)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """On CUDA, a kernel that fails a device-side assert (eager's own index
    checks among them) leaves the process's CUDA context unusable, so every
    later test in the process would fail with it. Such a process ends after
    the test that caused it; pytest-xdist names that test as the one its
    worker crashed in and starts a fresh worker for the rest."""
    if not os.environ.get("CONVEYOR_TEST_DEVICE", "").startswith("cuda"):
        return
    import torch

    try:
        torch.cuda.synchronize()
    except RuntimeError as exc:  # torch.AcceleratorError: nothing in this process can use the GPU again
        if "CUDA error" not in str(exc):
            raise
        print(f"\n{item.nodeid}: the CUDA context failed ({type(exc).__name__}: {str(exc).splitlines()[0]}); this worker ends")
        os._exit(3)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow (nox does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
