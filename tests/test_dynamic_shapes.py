"""Every stage and both backends take symbolic sizes from ``conveyor.compile``
(core Note [Automatic dynamic shapes])."""

import conveyor
import pytest
import torch
from conveyor.testing import check


def _symbolic(entry):
    return entry.guards is not None


@pytest.mark.parametrize("backend_name", ["eager", "triton"])
def test_every_stage_and_backend_take_symbolic_sizes(backend_name, recwarn):
    def f(x, buf, w):
        buf.add_(x.sum(0))  # functionalize: a mutated input, replayed by its epilogue
        y = torch.tanh(x @ w) + buf
        return y, x[0], y[1:]  # outputs that alias an input and an intermediate

    c = conveyor.compile(f, backend=backend_name)
    w = torch.randn(3, 3, requires_grad=True)
    for n in (2, 3, 5):
        check(f, torch.randn(n, 3, requires_grad=True), torch.zeros(3), w, compile=lambda fn: c)
    assert _symbolic(c.last) and c.last.backend == backend_name
    stages = [g.stage for g in c.last.graphs]
    assert {"functionalize", "autograd", backend_name} <= set(stages)
    assert not [w for w in recwarn if "static sizes" in str(w.message)]



def test_training_a_module_over_batch_sizes_compiles_once_symbolically():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 3))
    ref = __import__("copy").deepcopy(model)
    c = conveyor.compile(model)
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for b in (4, 5, 6, 7, 9):
        x, y = torch.randn(b, 6), torch.randint(0, 3, (b,))
        for m, o in ((c, opt), (ref, ref_opt)):
            o.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            o.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q)
    assert c.compiles == 2 and _symbolic(c.last)


def test_the_same_tensor_twice_stays_symbolic_through_dedupe():
    # tied weights: one tensor in two positions, other inputs change size (a stage
    # that keys on the sizes of inputs sharing storage, synthetic_base, keeps
    # those sizes static: a different key is a different program)
    def f(w1, w2, x):
        return x @ w1 + (x @ w2.t()).sin()

    c = conveyor.compile(f)
    w = torch.randn(3, 3)
    for n in (2, 3, 4, 6):
        x = torch.randn(n, 3)
        torch.testing.assert_close(c(w, w, x), f(w, w, x))
    assert c.compiles == 2 and _symbolic(c.last)
    assert "dedupe" in [g.stage for g in c.last.graphs]


def _alibi_scores(alibi, q, k):
    # BLOOM's attention scores: the first operand broadcasts over the query length
    return torch.baddbmm(alibi, q, k.transpose(1, 2), beta=1.0, alpha=0.5).softmax(-1)


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
def test_a_broadcast_baddbmm_stays_symbolic(entry, recwarn):
    torch._dynamo.reset()
    if entry == "conveyor":
        compiled = conveyor.compile(_alibi_scores, dynamic=True)
    else:
        compiled = torch.compile(_alibi_scores, backend="conveyor", dynamic=True)
    for s in (5, 7, 9):
        inputs = (torch.randn(4, 1, s), torch.randn(4, s, 8, requires_grad=True), torch.randn(4, s, 8, requires_grad=True))
        check(_alibi_scores, *inputs, compile=lambda fn: compiled)
    assert not [w for w in recwarn if "conveyor" in str(w.message)], [str(w.message) for w in recwarn]
    if entry == "conveyor":
        assert compiled.compiles == 1
