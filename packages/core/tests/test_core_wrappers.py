"""Forward hooks are the program's code (Note [Forward hooks]); a computed
tensor made to require grad (Note [Tensors the program makes require grad]).
DDP/FSDP refusals are in tests/test_distributed.py."""

import functools
import warnings

import conveyor
import pytest
import torch
from conveyor.testing import check


def _no_eager_fallback(caught: list[warnings.WarningMessage]) -> None:
    eager = [str(w.message) for w in caught if "eagerly" in str(w.message)]
    assert not eager, eager


def _compiled_quietly(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checked = check(fn, *args)
    _no_eager_fallback(caught)
    assert not checked.compiled.last.eager
    return checked


def test_a_hook_that_only_transforms_tensors_is_compiled_in():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model[0].register_forward_hook(lambda mod, inp, out: out * 2)
    model[2].register_forward_pre_hook(lambda mod, inp: (inp[0] + 1,))
    model[1].register_forward_hook(functools.partial(lambda scale, mod, inp, out: out * scale, 0.5))
    _compiled_quietly(model, torch.randn(3, 4, requires_grad=True))


def test_a_hook_with_kwargs_and_a_bound_method_hook_are_compiled_in():
    class Scaler:
        def __init__(self):
            self.scale = 3.0

        def hook(self, mod, args, kwargs, out):
            return out * self.scale

    scaler = Scaler()
    model = torch.nn.Linear(4, 3)
    model.register_forward_hook(scaler.hook, with_kwargs=True)
    _compiled_quietly(model, torch.randn(2, 4))


@pytest.mark.parametrize("kind", ["closure list", "bound object", "global counter"])
def test_a_hook_that_writes_python_state_runs_every_call_eagerly_with_a_warning(kind):
    calls = []

    class Store:
        def __init__(self):
            self.activations = {}

        def hook(self, mod, inp, out):
            self.activations["x"] = out.detach()

    def counting(mod, inp, out):
        calls.append(1)
        return out * 2

    def global_counting(mod, inp, out):
        global _COUNT
        _COUNT += 1

    store = Store()
    hook = {"closure list": counting, "bound object": store.hook, "global counter": global_counting}[kind]
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    model[0].register_forward_hook(hook)
    compiled = conveyor.compile(model)
    x = torch.randn(2, 4)
    before = _COUNT
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
    assert compiled.last.eager
    assert any("forward hook" in str(w.message) for w in caught), [str(w.message) for w in caught]
    if kind == "closure list":
        assert len(calls) == 6  # three compiled calls and three reference calls: none baked in
    elif kind == "bound object":
        assert type(store.activations["x"]) is torch.Tensor  # a real tensor, never a fake
    else:
        assert _COUNT == before + 6


_COUNT = 0


def test_a_global_forward_pre_hook_is_compiled_in_and_its_writes_are_seen():
    seen = []
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda mod, inp: None)
    try:
        _compiled_quietly(torch.nn.Linear(3, 2), torch.randn(1, 3))
    finally:
        handle.remove()
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda mod, inp: seen.append(mod))
    try:
        compiled = conveyor.compile(torch.nn.Linear(3, 2))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled(torch.randn(1, 3))
        assert any("global module hook" in str(w.message) for w in caught)
        assert compiled.last.eager
    finally:
        handle.remove()


def test_a_hook_registered_or_removed_after_compiling_is_seen_at_the_next_call():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    compiled = conveyor.compile(model)
    x = torch.randn(2, 3)
    for step in range(6):  # each change is seen on every later call, the per-call guards' too
        if step == 1:
            handle = model[0].register_forward_hook(lambda mod, inp, out: out + 1)
        if step == 3:
            handle.remove()
        if step == 4:
            glob = torch.nn.modules.module.register_module_forward_hook(lambda mod, inp, out: out * 2)
        if step == 5:
            glob.remove()
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), x @ model[0].weight.T + model[0].bias)
    assert compiled.compiles == 3 and not compiled.last.eager  # without, with, with the global hook


def _frozen_embedding_model(hooked: bool = True, frozen_rest: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    model[0].weight.requires_grad_(False)
    if frozen_rest:
        model.requires_grad_(False)

    def make_inputs_require_grads(module, input, output):  # transformers' enable_input_require_grads
        output.requires_grad_(True)

    if hooked:
        model[0].register_forward_hook(make_inputs_require_grads)
    return model


def test_a_hook_that_makes_the_input_embeddings_require_grad_compiles():
    checked = _compiled_quietly(_frozen_embedding_model(), torch.randint(0, 10, (2, 5)))
    assert checked.compiled_out.requires_grad


def test_setting_requires_grad_on_a_computed_tensor_compiles_when_outputs_require_grad_anyway():
    lin = torch.nn.Linear(4, 4)

    def fn(x):
        h = x * 2
        h.requires_grad = True  # wav2vec2's feature encoder
        return lin(h).sum(), h.detach()

    _compiled_quietly(fn, torch.randn(3, 4))


@pytest.mark.parametrize("case", ["only through it", "it is an output", "an input"])
def test_require_grad_the_graph_cannot_record_runs_eagerly_with_a_warning(case):
    if case == "only through it":
        fn, args = _frozen_embedding_model(frozen_rest=True), (torch.randint(0, 10, (2, 5)),)
    elif case == "it is an output":

        def fn(x):
            h = x * 2
            h.requires_grad_()
            return h, h * 3

        args = (torch.randn(3),)
    else:

        def fn(x):
            x.requires_grad_()
            return x * 2

        args = (torch.randn(3),)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checked = check(fn, *args)
    assert checked.compiled.last.eager
    assert any("requires_grad" in str(w.message) for w in caught)
