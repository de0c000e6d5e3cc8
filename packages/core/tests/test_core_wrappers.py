"""Modules whose forward does Python work a captured graph cannot replay
(Note [Forward hooks]; DDP/FSDP refusals are in tests/test_distributed.py)."""

import warnings

import conveyor
import torch


def test_a_forward_hook_with_side_effects_runs_every_call_eagerly_with_a_warning():
    calls = []
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

    def counting(mod, inp, out):
        calls.append(1)
        return out * 2

    model[0].register_forward_hook(counting)
    compiled = conveyor.compile(model)
    x = torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
    assert len(calls) == 6  # three compiled calls and three reference calls: none baked in
    assert any("forward hook" in str(w.message) and "counting" in str(w.message) for w in caught)


def test_a_global_forward_pre_hook_is_detected():
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda mod, inp: None)
    try:
        compiled = conveyor.compile(torch.nn.Linear(3, 2))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled(torch.randn(1, 3))
        assert any("global module hook" in str(w.message) for w in caught)
    finally:
        handle.remove()


def test_a_hook_registered_after_compiling_is_seen_at_the_next_call():
    model = torch.nn.Linear(3, 2)
    compiled = conveyor.compile(model)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), model(x))
    handle = model.register_forward_hook(lambda mod, inp, out: out + 1)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        torch.testing.assert_close(compiled(x), model(x))
    assert compiled.last.eager
    handle.remove()
    torch.testing.assert_close(compiled(x), model(x))
