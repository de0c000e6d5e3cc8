"""Python objects in and out of ``conveyor.compile`` (Note [Python objects in and out])."""

import conveyor
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor


class Box:  # not a pytree node
    def __init__(self, t):
        self.t = t


class Cache:
    def __init__(self):
        self.k = None

    def update(self, x):
        self.k = x if self.k is None else torch.cat([self.k, x])
        return self.k


class ListCache:
    def __init__(self):
        self.items = []
        self.calls = 0

    def push(self, x):
        self.items.append(x * 2)
        self.calls += 1
        return torch.stack(self.items).sum(0)


def _no_fakes(value, seen=None):
    seen = set() if seen is None else seen
    if id(value) in seen:
        return True
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return not isinstance(value, FakeTensor) and not isinstance(value, torch._subclasses.FakeTensor)
    if isinstance(value, (list, tuple)):
        return all(_no_fakes(v, seen) for v in value)
    if isinstance(value, dict):
        return all(_no_fakes(v, seen) for v in value.values())
    if hasattr(value, "__dict__"):
        return all(_no_fakes(v, seen) for v in vars(value).values())
    return True


def test_a_returned_object_is_rebuilt_per_call_with_real_tensors():
    def f(x):
        return x * 2, Box(x + 1)

    c = conveyor.compile(f)
    x = torch.randn(3)
    (a, b), (_, b2) = c(x), c(x + 1)
    assert type(b) is Box and b is not b2 and _no_fakes(b)
    torch.testing.assert_close(b.t, x + 1)
    torch.testing.assert_close(b2.t, x + 2)
    torch.testing.assert_close(a, x * 2)


def test_attribute_writes_on_an_argument_object_are_replayed():
    def g(x, cache):
        return cache.update(x).sum()

    c = conveyor.compile(g)
    x = torch.full((3,), 2.0)
    eager, compiled = Cache(), Cache()
    want = [g(x, eager).item() for _ in range(3)]
    got = [c(x, compiled).item() for _ in range(3)]
    assert want == got == [6.0, 12.0, 18.0]
    assert _no_fakes(compiled) and type(compiled.k) is torch.Tensor
    torch.testing.assert_close(compiled.k, eager.k)
    # the cache's tensor shapes and None-ness are part of the key: three specializations
    assert c.compiles == 3


def test_list_appends_and_counters_on_an_argument_object_are_replayed():
    def f(x, cache):
        return cache.push(x)

    c = conveyor.compile(f, dynamic=False)
    eager, compiled = ListCache(), ListCache()
    xs = [torch.randn(2) for _ in range(3)]
    for x in xs:
        torch.testing.assert_close(c(x, compiled), f(x, eager))
    assert compiled.calls == eager.calls == 3 and len(compiled.items) == 3
    for a, b in zip(compiled.items, eager.items):
        torch.testing.assert_close(a, b)
    assert _no_fakes(compiled)


def test_the_argument_object_returned_is_the_callers_object():
    def f(x, cache):
        cache.update(x)
        return {"cache": cache, "y": x + 1}

    cache = Cache()
    out = conveyor.compile(f)(torch.ones(2), cache)
    assert out["cache"] is cache and type(cache.k) is torch.Tensor
    torch.testing.assert_close(cache.k, torch.ones(2))


def test_a_failed_capture_leaves_the_callers_objects_as_they_were():
    """The capture fails (its control flow depends on values: core Note
    [Programs only dynamo can split]) after writing fakes into the caller's
    object; they are put back before dynamo runs the program as eager does."""

    def f(x, cache):
        cache.update(x * 3)
        if cache.k.sum() > 0:  # data-dependent: a standalone capture fails
            return x
        return -x

    cache, ref = Cache(), Cache()
    cache.k, ref.k = torch.ones(2), torch.ones(2)
    with pytest.warns(UserWarning, match="through dynamo"):
        out = conveyor.compile(f)(torch.ones(2), cache)
    torch.testing.assert_close(out, f(torch.ones(2), ref))
    assert type(cache.k) is torch.Tensor and vars(cache).keys() == vars(ref).keys()
    torch.testing.assert_close(cache.k, ref.k)


def test_a_module_writing_its_own_attributes_runs_eagerly_with_a_warning():
    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.last = None

        def forward(self, x):
            self.last = self.lin(x)
            return self.last * 2

    m = Counting()
    c = conveyor.compile(m)
    x = torch.randn(2, 3)
    with pytest.warns(UserWarning, match=r"writes to \['Counting.last'\].*torch.compile"):
        out = c(x)
    torch.testing.assert_close(out, m.lin(x) * 2)
    assert type(m.last) is torch.Tensor  # eager ran: the real value


def test_a_result_that_cannot_be_rebuilt_runs_eagerly_with_a_warning():
    class Slotted:
        __slots__ = ("t",)

        def __init__(self, t):
            self.t = t

    def f(x):
        return Slotted(x + 1)

    with pytest.warns(UserWarning, match="Slotted holding tensors.*torch.compile"):
        out = conveyor.compile(f)(torch.ones(2))
    assert type(out.t) is torch.Tensor
    torch.testing.assert_close(out.t, torch.full((2,), 2.0))


def test_gradients_flow_through_an_object_result():
    def f(x, w):
        return Box(x @ w)

    x, w = torch.randn(2, 3), torch.randn(3, 3, requires_grad=True)
    out = conveyor.compile(f)(x, w)
    out.t.sum().backward()
    torch.testing.assert_close(w.grad, x.t() @ torch.ones(2, 3))


CACHE = Cache()


def test_a_write_to_a_global_object_runs_eagerly_and_leaves_no_fake():
    def f(x):
        return CACHE.update(x).sum()

    c = conveyor.compile(f)
    x = torch.full((3,), 2.0)
    with pytest.warns(UserWarning, match=r"writes to \['CACHE.k'\].*State a program reaches.*torch.compile"):
        got = [c(x).item() for _ in range(3)]
    assert got == [6.0, 12.0, 18.0]  # eager's
    assert type(CACHE.k) is torch.Tensor and CACHE.k.shape == (9,)


def test_a_write_to_an_object_in_a_closure_cell_runs_eagerly():
    box = Box(torch.zeros(2))

    def f(x):
        box.t = box.t + x
        return box.t * 1

    with pytest.warns(UserWarning, match=r"writes to \['box.t'\]"):
        out = conveyor.compile(f)(torch.ones(2))
    torch.testing.assert_close(out, torch.ones(2))
    assert type(box.t) is torch.Tensor


def test_an_lstm_compiles_and_keeps_real_flat_weights(recwarn):
    m = torch.nn.LSTM(3, 4)
    c = conveyor.compile(m)
    x = torch.randn(5, 2, 3)
    torch.testing.assert_close(c(x)[0], m(x)[0])
    # functional_call's parameter swap rewrites _flat_weights; the capture puts them back
    assert all(type(t) is torch.nn.Parameter for t in m._flat_weights)
    assert not [w for w in recwarn if "eagerly" in str(w.message)]


LOG = __import__("logging").getLogger("conveyor.tests.objects")


def test_a_logger_used_by_the_program_is_not_taken_for_its_state(recwarn):
    def f(x):
        LOG.isEnabledFor(10)  # fills the logger's level cache during the trace
        return x * 2

    LOG.manager._clear_cache()
    torch.testing.assert_close(conveyor.compile(f)(torch.ones(2)), torch.full((2,), 2.0))
    assert not [w for w in recwarn if "eagerly" in str(w.message)]


_calls = 0


def _counting(x):
    global _calls
    _calls += 1
    return x + _calls


def test_a_rebound_global_runs_eagerly_with_a_warning():
    global _calls
    _calls = 0
    compiled = conveyor.compile(_counting)
    with pytest.warns(UserWarning, match=r"writes to \['global _calls'\]"):
        first = compiled(torch.zeros(1))
    results = [first.item(), *(compiled(torch.zeros(1)).item() for _ in range(2))]
    assert results == [1.0, 2.0, 3.0] and _calls == 3  # eager's values; the trace's write was undone


def test_a_rebound_closure_variable_runs_eagerly_with_a_warning():
    n = 0

    def counting(x):
        nonlocal n
        n += 1
        return x * n

    compiled = conveyor.compile(counting)
    with pytest.warns(UserWarning, match=r"closure variable n"):
        results = [compiled(torch.ones(1)).item() for _ in range(3)]
    assert results == [1.0, 2.0, 3.0] and n == 3


@pytest.mark.parametrize(
    "write",
    [
        lambda x, box: box.append(x * 2),
        lambda x, box: box.__setitem__(0, x * 2),
        lambda x, box: box.clear(),
    ],
    ids=["append", "setitem", "clear"],
)
def test_a_written_argument_list_runs_eagerly_with_a_warning(write):
    def program(x, box):
        write(x, box)
        return x + 1

    eager_box, compiled_box = [torch.zeros(1)], [torch.zeros(1)]
    compiled = conveyor.compile(program)
    with pytest.warns(UserWarning, match="Argument containers written by the program"):
        for _ in range(2):
            torch.testing.assert_close(compiled(torch.ones(1), compiled_box), program(torch.ones(1), eager_box))
    assert len(compiled_box) == len(eager_box)
    for a, b in zip(compiled_box, eager_box, strict=True):
        assert not isinstance(a, torch._subclasses.FakeTensor)
        torch.testing.assert_close(a, b)


def test_a_written_argument_dict_runs_eagerly_with_a_warning():
    def program(x, d):
        d["seen"] = x.sum()
        return x * 2

    d: dict = {}
    compiled = conveyor.compile(program)
    with pytest.warns(UserWarning, match="Argument containers written by the program"):
        compiled(torch.ones(2), d)
    assert set(d) == {"seen"} and not isinstance(d["seen"], torch._subclasses.FakeTensor)


def test_a_torch_size_result_stays_a_torch_size():
    def program(a, b):
        return torch.broadcast_shapes(a.shape, b.shape), (a.size(), a * 2)

    a, b = torch.randn(3, 1), torch.randn(1, 4)
    compiled = conveyor.compile(program)
    for _ in range(2):
        shape, (size, out) = compiled(a, b)
        assert type(shape) is torch.Size and shape == torch.Size([3, 4])
        assert type(size) is torch.Size and size == a.shape
        torch.testing.assert_close(out, a * 2)
    # another size: symbolic sizes cannot hold a size as a constant result, so it compiles with static ones
    with pytest.warns(UserWarning, match="with static sizes: .*symbolic size"):
        shape, (size, _) = compiled(torch.randn(2, 1), torch.randn(1, 5))
    assert type(shape) is torch.Size and shape == torch.Size([2, 5]) and size == torch.Size([2, 1])
    assert compiled.compiles == 3


@pytest.mark.parametrize("wrap", ["plain", "checkpoint_wrapper"])
def test_a_submodule_reached_by_two_paths_compiles(recwarn, wrap):
    """Note [A submodule reached by two paths]: ``Sequential(lin, lin)`` ran
    eagerly ("it writes to ['Sequential.0.bias', ...]"), and left no fake only
    because the state watch put the parameters back."""
    from conveyor.testing import check
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    lin = torch.nn.Linear(3, 3)
    mod = torch.nn.Sequential(lin, torch.nn.Tanh(), lin)
    if wrap == "checkpoint_wrapper":
        mod = CheckpointWrapper(mod)
    check(mod, torch.randn(2, 3, requires_grad=True))
    assert not [w for w in recwarn if "eagerly" in str(w.message)]
    assert all(type(p) is torch.nn.Parameter for p in mod.parameters())


@pytest.mark.parametrize("requires_grad", [True, False])
def test_a_parameter_made_of_a_closed_over_tensor_compiles_through_dynamo(requires_grad):
    """Note [Parameters a program makes]: the second trace lifted the real
    nn.Parameter as a constant and the fake mode refused it ("Please convert all
    Tensors to FakeTensors first"; test_cpu_repro.py's test_nn_param_assign)."""
    from conveyor.testing import check

    class Rebinding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.w = torch.randn(3, 3)

        def forward(self, x):
            self.lin.weight = torch.nn.Parameter(self.w, requires_grad=requires_grad)
            return self.lin(x)

    with pytest.warns(UserWarning, match=r"through dynamo.*nn.Parameter of a tensor it closes over"):
        check(Rebinding(), torch.randn(2, 3))


def test_a_closure_rebound_by_a_function_the_program_calls_runs_eagerly():
    """Note [Functions a program calls by name]: ``gn`` counted once, at trace
    time, and never again: the compiled program dropped the side effect."""
    counter = 0

    def gn(x):
        nonlocal counter
        counter += 1
        return x.sin()

    def fn(x):
        return gn(x) * 2

    f = conveyor.compile(fn)
    with pytest.warns(UserWarning, match="eagerly"):
        f(torch.randn(3))
    f(torch.randn(3))
    assert counter == 2
