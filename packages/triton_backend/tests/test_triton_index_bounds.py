"""Note [Indexes out of range] (``conveyor_triton.program``): an index read
out of range raises eager's error, never gives 0; the in-range calls run the
generated kernel."""

import conveyor_triton
import pytest
import torch
from conveyor.testing import check

CASES = {
    "index_select": (
        lambda x, i: torch.index_select(x, 0, i) * 2,
        lambda n: (torch.randn(5, 3), torch.tensor([0, n, 1])),
    ),
    "embedding": (
        lambda w, i: torch.nn.functional.embedding(i, w) + 1,
        lambda n: (torch.randn(5, 3), torch.tensor([[0, n], [1, 2]])),
    ),
    "gather": (
        lambda x, i: torch.gather(x, 1, i) * 2,
        lambda n: (torch.randn(4, 3), torch.tensor([[0, 1], [n, 0], [1, 1], [2, 0]])),
    ),
    "x[i]": (lambda x, i: x[i] * 2, lambda n: (torch.randn(5, 3), torch.tensor([0, n, 1]))),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("launch", [{}, {"launch_for": "cuda"}])
def test_an_index_out_of_range_raises_eagers_error(triton_only, errors_raised_on_the_host, name, launch):
    fn, make = CASES[name]
    compiled = check(fn, *make(2), compile=triton_only(**launch)).compiled
    (prog,) = conveyor_triton.programs(compiled)
    assert any(step.bounds for step in prog.kernels), "the index read is not a kernel"
    x, i = make(5 if name != "gather" else 3)  # out of range
    with pytest.raises((IndexError, RuntimeError)) as eager:
        fn(x, i)
    with pytest.raises(eager.type):
        compiled(x, i)
    if name == "x[i]":
        check(fn, *make(-5), compile=triton_only(**launch))  # counts from the end
        x, i = make(-6)
        with pytest.raises(IndexError):
            compiled(x, i)


_TRAP = """
import torch, conveyor
torch.set_default_device("cuda")
f = conveyor.compile(lambda x, i: torch.index_select(x, 0, i) * 2, backend="triton", cache=False)
x = torch.randn(5, 3)
print(f(x, torch.tensor([0, 2, 1])).sum().item(), flush=True)  # in range: the kernel runs
f(x, torch.tensor([0, 5, 1]))
torch.cuda.synchronize()
print("no trap")
"""


@pytest.mark.skipif(torch.get_default_device().type != "cuda", reason="a device-side assert needs CUDA")
def test_an_index_out_of_range_traps_on_cuda():
    # as eager's own kernel does: the generated kernel's range check is compiled in
    # (Triton's debug mode) and traps; the process's CUDA context is lost, so a child runs it
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "0"}
    run = subprocess.run([sys.executable, "-c", _TRAP], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode != 0 and "no trap" not in run.stdout, run.stdout + run.stderr
    assert "device-side assert" in run.stderr or "index out of range" in run.stderr, run.stderr[-2000:]
