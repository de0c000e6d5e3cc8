"""The kernel source cache, 64-bit indexing, the interpreter switch and the metrics."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import conveyor_triton
import torch
from conveyor.testing import check
from conveyor_triton import kernel_cache, metrics, program


def _fn(x, y):
    return torch.softmax(x * y, -1), (x + 1).sum(0)


def test_sources_live_in_files_named_by_hash(triton_only, tmp_path):
    result = check(_fn, torch.randn(4, 8), torch.randn(4, 8), compile=triton_only(cache_dir=str(tmp_path)))
    (prog,) = conveyor_triton.programs(result.compiled)
    for step in prog.kernels:
        path = step.files["static"]
        assert path.parent.parent == tmp_path
        assert path.read_text() == step.kernel.source
        assert path.name == f"k_{kernel_cache.source_hash(step.kernel.source)}.py"


def test_corrupt_entry_is_rebuilt(triton_only, tmp_path):
    source = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k_corrupt(x):\n    pass\n"
    path = kernel_cache.path_for(tmp_path, kernel_cache.source_hash(source))
    path.parent.mkdir(mode=0o700, parents=True)
    path.write_text("def k_corrupt(:  # torn write")
    fn, where = kernel_cache.load(source, "k_corrupt", tmp_path)
    assert where == path and path.read_text() == source
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]


def test_64_bit_indexing_variant(triton_only, monkeypatch):
    monkeypatch.setattr(program, "INT32_LIMIT", 16)  # every launch of more than 16 elements goes wide
    result = check(_fn, torch.randn(4, 8), torch.randn(4, 8), compile=triton_only())
    (prog,) = conveyor_triton.programs(result.compiled)
    assert all("tl.program_id(0).to(tl.int64)" in step.kernel.source for step in prog.kernels)  # static kernels
    assert all("tl.program_id(0).to(tl.int64)" in step.sources["generic64"].source for step in prog.kernels)


def test_a_value_in_another_layout_runs_the_generic_kernel(triton_only):
    # Note [Static layouts]: the static kernel reads its operands as their meta values were laid out
    compiled = triton_only()(lambda x, y: x * y + 1)
    compiled(torch.randn(4, 8), torch.randn(4, 8))
    (prog,) = conveyor_triton.programs(compiled)
    (step,) = prog.kernels
    assert step.kernel.static and set(step.files) == {"static"}
    a, b = torch.randn(8, 4).t(), torch.randn(8, 4).t()  # the same shape, transposed strides
    env = dict(zip(prog.placeholders, (a, b)))
    step.run(env)
    torch.testing.assert_close(env[step.kernel.stores[0].node], a * b + 1)
    assert set(step.files) == {"static", "generic"}


def test_metrics_count_kernels_and_bytes(triton_only):
    compiled = triton_only()(_fn)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    with metrics.counting() as counts:
        compiled(x, y)
    (report,) = conveyor_triton.reports(compiled)
    assert counts.kernels == len(report.kernels) and counts.aten_calls == 0
    assert counts.bytes >= 3 * x.nbytes  # x and y read, the softmax written


def test_triton_imported_without_the_interpreter_is_a_clear_error():
    code = textwrap.dedent(
        """
        import triton, torch, conveyor, conveyor_triton.plugin as p
        plugins = conveyor.Plugins(); plugins.register(p, name="triton")
        try:
            conveyor.compile(lambda x: x + 1, plugins=plugins, backend="triton")(torch.ones(2))
        except RuntimeError as e:
            print(e)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "set TRITON_INTERPRET=1" in out.stdout, out.stdout + out.stderr


def test_log_switch_prints_each_kernel_once(triton_only, capsys, tmp_path):
    compiled = triton_only(log=True, cache_dir=str(tmp_path))(_fn)
    compiled(torch.randn(3, 5), torch.randn(3, 5))
    compiled(torch.randn(3, 5), torch.randn(3, 5))
    out = capsys.readouterr().out
    (report,) = conveyor_triton.reports(compiled)
    for k in report.kernels:
        assert out.count(f"kernel {k.name} ->") == 1 and f"def {k.name}(" in out


def test_a_bound_launch_calls_the_compiled_kernel_as_triton_does(monkeypatch):
    # Note [Bound launches]: the launcher gets grid, stream, function, metadata, no hooks,
    # then the tensors and the block sizes in parameter order
    calls = []

    class Compiled:
        function, packed_metadata = "fn", "meta"

        def run(self, *args):
            calls.append(args)

    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)  # CPU tensors' device index
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    launch = program.Launch(xblock=4, rblock=64, num_warps=2, grid=3, persistent=True)
    a, b = torch.zeros(16, device="cpu"), torch.zeros(16, device="cpu")
    bound = program.bind(Compiled(), launch, [a, b])
    assert bound([a, b]) is True
    assert calls == [(3, 1, 1, 7, "fn", "meta", None, None, None, a, b, 4, 64)]
    assert bound([a[1:], b]) is False and len(calls) == 1  # unaligned: Triton would specialize anew
    assert program.bind(None, launch, [a, b]) is None  # the interpreter returns no compiled kernel


def test_a_launch_hook_unbinds_launches(monkeypatch):
    from triton import knobs

    class Compiled:
        function, packed_metadata = "fn", "meta"

        def run(self, *args):
            raise AssertionError("a hooked launch must go through Triton's JITFunction")

    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    a = torch.zeros(16, device="cpu")
    bound = program.bind(Compiled(), program.Launch(4, None, 1, 4, False), [a])
    hook = lambda metadata: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert bound([a]) is False
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
