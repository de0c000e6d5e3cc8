"""An index read whose index is produced by another index read used nowhere
else recomputes it at the index's coordinates, in one kernel (Note [Index
producers] in ``conveyor_triton.index_reads``): BERT's token type ids, a
``gather`` of a buffer at the position ids, read by an embedding at the
output's leading coordinates. Against eager with the interpreter's launches
and a GPU's; indexes out of range; an sm_90 / sm_80 compile."""

from __future__ import annotations

import conveyor_triton
import pytest
import torch
import torch.nn.functional as F
from conveyor.testing import check
from conveyor_triton import aot

LAUNCHES = [pytest.param({}, id="interpreter"), pytest.param({"launch_for": "cuda"}, id="gpu-launches")]


def token_types(buf, pos, types, words, ids):
    tt = torch.gather(buf.expand(pos.shape[0], -1), 1, pos)
    e = F.embedding(tt, types) + F.embedding(ids, words)
    return F.layer_norm(e, (e.shape[-1],))


def hf_token_types(buf, pos, types, words, ids):
    # as Hugging Face's BertEmbeddings: the gathered ids (1, seq) expanded to the batch
    tt = torch.gather(buf.expand(1, -1), 1, pos[:1]).expand(ids.shape[0], -1)
    e = F.embedding(tt, types) + F.embedding(ids, words)
    return F.layer_norm(e, (e.shape[-1],))


def subscripts(x, i, j):
    # x[k] with k = i.index_select(0, j) (negative values count from the end), and a pointwise user
    return x[i.index_select(0, j)] * 2, x[:, i[j]].sin()


def _token_args(types=2):
    return (
        torch.randint(0, types, (1, 16)),
        torch.randperm(16)[:8].expand(2, 8).contiguous(),
        torch.randn(types, 32),
        torch.randn(50, 32),
        torch.randint(0, 50, (2, 8)),
    )


def _kernels(compiled) -> list[list[str]]:
    return [list(k.nodes) for r in conveyor_triton.reports(compiled) for k in r.kernels]


@pytest.mark.parametrize("options", LAUNCHES)
@pytest.mark.parametrize("fn", [token_types, hf_token_types], ids=["gather", "gather-expand"])
def test_the_producer_is_recomputed_in_the_reading_kernel(triton_only, options, fn):
    result = check(fn, *_token_args(), compile=triton_only(**options), atol=1e-5, rtol=1e-5)
    kernels = _kernels(result.compiled)
    assert len(kernels) == 1, kernels
    assert {"gather", "embedding"} <= {n.split(".")[0].split("_")[0] for n in kernels[0]}, kernels


@pytest.mark.parametrize("options", LAUNCHES)
def test_a_wrapping_producer(triton_only, options):
    args = (torch.randn(7, 7), torch.tensor([-1, 3, -7, 6, 0]), torch.tensor([4, 0, 2, 2, 1, 3]))
    result = check(subscripts, *args, compile=triton_only(**options))
    assert not isinstance(result.eager_out, Exception), result.eager_out
    assert len(_kernels(result.compiled)) == 1, _kernels(result.compiled)  # both outputs, both producers


def test_a_producer_with_other_users_stays_a_kernel(triton_only):
    def fn(buf, pos, types, words, ids):
        tt = torch.gather(buf.expand(pos.shape[0], -1), 1, pos)
        return F.embedding(tt, types) * 2, tt + 1

    result = check(fn, *_token_args(), compile=triton_only())
    assert len(_kernels(result.compiled)) == 2, _kernels(result.compiled)


def test_an_expand_with_other_users_stays_a_view(triton_only):
    def fn(buf, pos, types, words, ids):
        tt = torch.gather(buf.expand(1, -1), 1, pos[:1]).expand(ids.shape[0], -1)
        return F.embedding(tt, types) * 2, tt * 3

    result = check(fn, *_token_args(), compile=triton_only())
    assert len(_kernels(result.compiled)) == 3, _kernels(result.compiled)  # the gather, and one per output


@pytest.mark.parametrize("fn", [token_types, hf_token_types], ids=["gather", "gather-expand"])
@pytest.mark.parametrize("where", ["producer", "position"])
def test_indexes_out_of_range_raise_eagers_error(triton_only, errors_raised_on_the_host, where, fn):
    """On CPU the kernel step computes the recomputed index by the producer's
    aten call to check its range (Note [Indexes out of range])."""
    args = list(_token_args())
    if where == "producer":
        args[0] = args[0].clone()
        args[0][0, args[1][0, 3]] = 2  # a token type the embedding table lacks
    else:
        args[1] = args[1].clone()
        args[1][:, 2] = 16  # a position past the buffer
    with pytest.raises(IndexError if where == "producer" else RuntimeError) as eager:
        fn(*args)
    with pytest.raises(type(eager.value)) as compiled:
        triton_only()(fn)(*args)
    assert str(compiled.value) == str(eager.value)


def test_index_producers_compile_for_sm90_and_sm80():
    from test_triton_aot import _compile_all, _program, _record

    runs = [
        (token_types, _token_args),
        (hf_token_types, _token_args),
        (subscripts, lambda: (torch.randn(7, 7), torch.tensor([-1, 3, -7, 6, 0]), torch.tensor([4, 0, 2, 2, 1, 3]))),
    ]
    recorder = _record([_program(fn, make_args) for fn, make_args in runs])
    results = _compile_all(recorder)
    assert not aot.errors(results), aot.errors(results)
    spilling = [r.name for r in results if r.stats is not None and r.stats.spills]
    assert not spilling, spilling
