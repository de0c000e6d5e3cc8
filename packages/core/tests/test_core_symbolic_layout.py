"""``conveyor.analysis.symbolic.symbolic_layout`` answers as the scan of
sizes, strides and storage offset does (Note [Reading the symbolic flag]),
with the flag and without it."""

from __future__ import annotations

import pytest
import torch
from conveyor.analysis import symbolic
from conveyor.analysis.symbolic import symbolic_layout
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext


def _scan(t: torch.Tensor) -> bool:
    layout = (*t.shape, *t.stride(), t.storage_offset()) if t.layout is torch.strided else t.shape
    return any(isinstance(d, torch.SymInt) for d in layout)


def _tensors() -> list[torch.Tensor]:
    mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
    sym = mode.from_tensor(torch.randn(4, 5), symbolic_context=dynamic)
    static = FakeTensorMode().from_tensor(torch.randn(2, 3, 4).transpose(0, 2))
    with mode:
        sym_offset = mode.from_tensor(torch.randn(20), static_shapes=True).as_strided((2, 2), (1, 1), sym.shape[0])
        sym_view = sym[1:]
    return [
        torch.randn(3, 4),
        torch.randn(3, 4).to_sparse(),
        static,
        mode.from_tensor(torch.randn(2, 3), static_shapes=True),
        sym,
        sym_view,
        sym_offset,
    ]


@pytest.mark.parametrize("flag", [True, False])
def test_symbolic_layout_is_the_scans_answer(flag: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(symbolic, "_FLAG", flag and symbolic._FLAG)
    tensors = _tensors()
    assert [symbolic_layout(t) for t in tensors] == [_scan(t) for t in tensors]
    assert [symbolic_layout(t) for t in tensors] == [False, False, False, False, True, True, True]


def test_the_flag_is_read_where_torch_has_it() -> None:
    assert symbolic._FLAG == hasattr(torch.Tensor, "_has_symbolic_sizes_strides")
