"""Note [Detach below the fake mode]: the stage's detach is ``t.detach()``
under the fake mode, tensor for tensor."""

from __future__ import annotations

import torch
from conveyor_autograd.detach import detached
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode


def _facts(t: torch.Tensor) -> tuple[object, ...]:
    return (
        type(t),
        t.size(),
        t.stride(),
        t.storage_offset(),
        t.dtype,
        t.device,
        t.requires_grad,
        t.is_leaf,
        t._is_view(),
        t.grad_fn,
        t.untyped_storage().nbytes(),
        t.fake_mode if isinstance(t, FakeTensor) else None,
    )


def test_the_same_tensors_as_detach_under_the_fake_mode() -> None:
    mode = FakeTensorMode()
    with mode:
        leaf = torch.empty(4, 6, requires_grad=True)
        nonleaf = leaf * 2
        view = nonleaf[1:, ::2]
        channels_last = torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)
        ints = torch.arange(5)
    inputs = (leaf, nonleaf, view, channels_last, ints, 3, None)
    with mode:
        expected = [t.detach() if isinstance(t, torch.Tensor) else t for t in inputs]
    got = detached(inputs, mode)
    for t, want, have in zip(inputs, expected, got, strict=True):
        if not isinstance(t, torch.Tensor):
            assert have is t
            continue
        assert have is not t
        assert _facts(have) == _facts(want)
        assert have.untyped_storage()._cdata == t.untyped_storage()._cdata  # the same storage
        before = t._version
        with mode, torch.no_grad():
            have.add_(1)
        assert t._version == before + 1  # the version counter is shared, as detach() shares it


def test_a_sparse_input_takes_detach_under_the_mode() -> None:
    # a sparse CSR fake has no strides: the fast path's layout check must not read them
    # (OpInfo's sparse.sampled_addmm raised "Sparse CSR tensors do not have strides")
    mode = FakeTensorMode()
    csr = mode.from_tensor(torch.eye(3).to_sparse_csr().requires_grad_())
    (got,) = detached([csr], mode)
    assert got.layout is torch.sparse_csr and not got.requires_grad and got.shape == csr.shape
