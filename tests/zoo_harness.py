"""What the module-zoo tests share: tolerances, the four compile entry points
(two entry points, two backends), a fresh dynamo per test, and comparing a
compiled module's state with an eager copy's."""

from __future__ import annotations

from typing import Any

import conveyor
import pytest
import torch
from torch import nn

TOL = {"atol": 1e-5, "rtol": 1e-4}
TRITON_TOL = {"atol": 1e-4, "rtol": 1e-4}


def conveyor_eager(m: Any) -> Any:
    return conveyor.compile(m)


def conveyor_triton(m: Any) -> Any:
    return conveyor.compile(m, backend="triton")


def dynamo_eager(m: Any) -> Any:
    return torch.compile(m, backend="conveyor")


def dynamo_triton(m: Any) -> Any:
    return torch.compile(m, backend="conveyor", options={"backend": "triton"})


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)


ENTRY_POINTS = [conveyor_eager, dynamo_eager]
ALL_ENTRY_POINTS = [conveyor_eager, dynamo_eager, conveyor_triton, dynamo_triton]


def entry_id(f: Any) -> str:
    return f.__name__


def assert_same_state(compiled_module: nn.Module, eager_module: nn.Module, where: str, **tol: float) -> None:
    for (name, a), (_, b) in zip(eager_module.state_dict().items(), compiled_module.state_dict().items(), strict=True):
        torch.testing.assert_close(b, a, **tol, msg=lambda m, n=name: f"{where}: {n}: {m}")
