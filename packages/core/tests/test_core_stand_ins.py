"""Stand-ins made below the fake mode (Note [Stand-ins made below the fake
mode]): fact by fact what the fake mode's own ``set_`` gives."""

from __future__ import annotations

import torch
from conveyor.frontend.stand_ins import stand_ins_of
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode


def _facts(t: torch.Tensor) -> tuple[object, ...]:
    return (
        type(t),
        t.device,
        t.dtype,
        t.shape,
        t.stride(),
        t.storage_offset(),
        t.requires_grad,
        t.is_leaf,
        t.untyped_storage()._cdata,
    )


def test_a_stand_in_is_the_fake_modes_own_tensor_on_the_same_storage() -> None:
    mode = FakeTensorMode()
    real = [
        torch.nn.Parameter(torch.randn(4, 6)),
        torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
        torch.arange(10)[2:8:2],
    ]
    fakes = [mode.from_tensor(t) for t in real]
    with mode:
        stand_ins = stand_ins_of(fakes, mode)
        for fake, stand_in in zip(fakes, stand_ins):
            assert stand_in is not fake
            assert isinstance(stand_in, FakeTensor) and stand_in.fake_mode is mode
            assert _facts(stand_in) == _facts(fake)
            before = fake._version
            with torch.no_grad():
                stand_in.add_(1)  # its own version counter: the input's is unchanged
            assert fake._version == before
