"""The kernels the backend generates compile with the real Triton compiler for
sm_90 and sm_80, ahead of time, with no GPU (Note [Ahead-of-time check] in
``conveyor_triton.aot``).

The default run compiles the kernels of a representative set of programs and
modules (about 30 distinct kernels, two targets); ``--runslow`` adds more
modules, shapes and the Hugging Face models. ``--aot-check`` (or
``CONVEYOR_AOT_CHECK=1``, ``nox -s triton_aot``) compiles every kernel a whole
test session launches (conftest.py).
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Iterable
from typing import Any

import conveyor
import conveyor_triton
import pytest
import torch
import torch.nn.functional as F
from conveyor_triton import aot, metrics
from test_triton_models import MODELS
from test_triton_programs import CASES

# ---------------------------------------------------------------------------
# Without compiling: PTX counting and Triton's specialization

PTX = """
\t@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
\tld.global.L1::evict_last.v2.b32 { %r5, %r6 }, [ %rd2 + 0 ];
\t@%p2 ld.global.b32 { %r7 }, [ %rd3 + 0 ];
\t@!%p3 ld.global.nc.b16 { %rs1 }, [ %rd4 + 0 ];
\t@%p4 st.global.v4.b32 [ %rd5 + 0 ], { %r1, %r2, %r3, %r4 };
\tst.global.b8 [ %rd6 + 0 ], { %rs2 };
\tdiv.s32 \t%r8, %r7, %r9;
\trem.u64 \t%rd7, %rd8, %rd9;
\tdiv.full.f32 \t%r10, %r11, %r12;
\tdiv.rn.f32 \t%r13, %r14, %r15;
\tld.shared.v4.b32 { %r1, %r2, %r3, %r4 }, [ %r16 + 0 ];
"""

PTXAS = """ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    24 bytes stack frame, 20 bytes spill stores, 28 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers
"""


def test_ptx_stats_counts_accesses_divisions_and_spills():
    s = aot.ptx_stats(PTX, PTXAS, shared=64)
    assert (s.loads_vector, s.loads_scalar, s.stores_vector, s.stores_scalar) == (2, 2, 1, 1)
    assert s.int_divs == 2  # not the float divisions
    assert (s.registers, s.stack, s.spill_stores, s.spill_loads, s.shared) == (255, 24, 20, 28, 64)
    assert s.vectorized and s.spills
    assert aot.ptx_stats("\tld.global.b32 { %r1 }, [ %rd1 + 0 ];").registers is None


KERNEL = '''import triton
import triton.language as tl


@triton.jit
def add_one(x, n, one, m, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(x + i * one, tl.load(x + i, mask=i < n) + m, mask=i < n)
'''


def test_gpu_launch_config_chooses_launches_for_a_gpu(triton_only, monkeypatch):
    fn = lambda x: torch.softmax(x, -1) + x.sum()  # noqa: E731
    x = torch.randn(64, 300)
    with aot.gpu_launch_config():
        on_gpu = triton_only()(fn)
        torch.testing.assert_close(on_gpu(x), fn(x), atol=1e-4, rtol=1e-5)  # x.sum() is a split reduction
    (prog,) = conveyor_triton.programs(on_gpu)
    tiles = [step.kernel.launch.xblock * (step.kernel.launch.rblock or 1) for step in prog.kernels]
    assert max(tiles) <= 4096  # Note [Launch configuration]: a GPU's tile
    assert any(step.kernel.launch.persistent and step.kernel.launch.rblock == 512 for step in prog.kernels)
    # the interpreter's own launches, also in an --aot-check session (which launches as on a GPU throughout)
    if torch.get_default_device().type == "cuda":
        return  # no interpreter here
    monkeypatch.delenv("CONVEYOR_TRITON_LAUNCH_FOR", raising=False)
    here = triton_only()(fn)
    here(torch.randn(65, 300))  # another shape: not served from the disk cache (its key has no launch device)
    (prog,) = conveyor_triton.programs(here)
    assert max(step.kernel.launch.xblock * (step.kernel.launch.rblock or 1) for step in prog.kernels) > 4096


def test_launch_is_tritons_own_specialization():
    """Pointers by dtype with a divisibility attribute when aligned, an int
    equal to 1 a constexpr, ints divisible by 16 marked, block sizes
    constexprs, other launch keywords compile options."""
    source = types.SimpleNamespace(name="add_one", source=KERNEL)
    x = torch.zeros(64)
    launch = aot.describe(source, (x, 17, 1, 32), {"XBLOCK": 128, "num_warps": 2})
    assert dict(launch.signature) == {"x": "*fp32", "n": "i32", "one": "constexpr", "m": "i32", "XBLOCK": "constexpr"}
    assert dict(launch.constexprs) == {(2,): 1, (4,): 128}
    assert dict(launch.attrs) == {(0,): (("tt.divisibility", 16),), (3,): (("tt.divisibility", 16),)}
    assert launch.options == (("num_warps", 2),)
    assert aot.Launch.from_json(json.loads(json.dumps(launch.to_json()))) == launch

    offset = aot.describe(source, (x[1:], 2**40, 1, 32), {"XBLOCK": 128})
    assert dict(offset.signature)["x"] == "*fp32" and dict(offset.signature)["n"] == "i64"
    assert (0,) not in dict(offset.attrs)  # 4 bytes in: not 16-byte aligned

    recorder = aot.Recorder()
    recorder(source, (x, 17, 1, 32), {"XBLOCK": 128, "num_warps": 2})
    recorder(source, (torch.ones(64), 17, 1, 32), {"XBLOCK": 128, "num_warps": 2})
    recorder(source, (x, 17, 1, 32), {"XBLOCK": 128, "bogus": 2})  # the JIT refuses it too
    assert recorder.total == 2 and recorder.launches() == [launch]
    assert len(recorder.failures) == 1 and "add_one" in recorder.failures[0] and "bogus" in recorder.failures[0]


# ---------------------------------------------------------------------------
# Compiling what the backend generates


def _record(runs: Iterable[Callable[[], Any]]) -> aot.Recorder:
    """The launches of ``runs``, configured as on a GPU (Note [GPU launch
    configuration on CPU])."""
    recorder = aot.Recorder()
    with metrics.watching_launches(recorder), aot.gpu_launch_config():
        for run in runs:
            torch.manual_seed(0)
            run()
    assert not recorder.failures, recorder.failures
    return recorder


def _program(fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]]) -> Callable[[], Any]:
    return lambda: conveyor.compile(fn, backend="triton")(*make_args())


def _module(make: Callable[[], torch.nn.Module], shape: tuple[int, ...]) -> Callable[[], Any]:
    def run() -> None:
        x = torch.randn(*shape, requires_grad=True)
        out = conveyor.compile(make(), backend="triton")(x)
        (out * torch.randn_like(out)).sum().backward()

    return run


def _half_block(dtype: torch.dtype) -> Callable[[], Any]:
    def block(x, w, b):
        y = F.layer_norm(x, (32,), w, b)
        return torch.softmax(y, -1), F.gelu(y), (x * w).sum(-1)

    return _program(block, lambda: (torch.randn(4, 32).to(dtype), torch.randn(32).to(dtype), torch.randn(32).to(dtype)))


def _integers(a, b, m):
    return a * 3 + b, (a + b).sum(-1), m.logical_and(a > 2), torch.where(m, a, b).amax(0)


def _compile_all(recorder: aot.Recorder, extra: tuple[aot.Launch, ...] = ()) -> list[aot.Result]:
    """Compile for sm_90 and sm_80, with :data:`aot.PROBE`; skip when it fails."""
    launches = [aot.PROBE, *extra, *recorder.launches()]
    results = aot.compile_launches(launches, archs=aot.ARCHS, workers=min(2, aot.default_workers()))
    reason = aot.cannot_compile(results[0])
    if reason:
        pytest.skip(reason)
    return results[len(aot.ARCHS) :]


BROKEN = aot.Launch(
    name="broken_kernel",
    source="import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef broken_kernel(x, XBLOCK: tl.constexpr):\n"
    "    tl.store(x + tl.arange(0, XBLOCK), tl.no_such_function(XBLOCK))\n",
    signature=(("x", "*fp32"), ("XBLOCK", "constexpr")),
    constexprs=(((1,), 64),),
    attrs=(),
)

#: the default (CI) part: programs of every kind, half precision and integers,
#: and three modules forward and backward (about 30 distinct kernels)
DEFAULT_RUNS: list[Callable[[], Any]] = [
    *(_program(fn, make_args) for fn, make_args in CASES),
    _half_block(torch.float16),
    _half_block(torch.bfloat16),
    _program(
        _integers,
        lambda: (torch.randint(-5, 5, (4, 6), dtype=torch.int8), torch.randint(-5, 5, (4, 6), dtype=torch.int8),
                 torch.rand(4, 6) > 0.5),
    ),
    *(_module(make, shape) for name, make, shape in MODELS if name in ("mlp", "norm_block", "transformer_encoder_layer")),
]


@pytest.fixture(scope="module")
def default_results() -> tuple[aot.Recorder, list[aot.Result]]:
    recorder = _record(DEFAULT_RUNS)
    results = _compile_all(recorder, extra=(BROKEN,))
    return recorder, results


def test_generated_kernels_compile_for_sm90_and_sm80(default_results):
    recorder, results = default_results
    ours = [r for r in results if r.name != BROKEN.name]
    assert len(recorder.launches()) >= 10 and len(ours) == 2 * len(recorder.launches())
    assert {r.arch for r in ours} == set(aot.ARCHS)
    assert not aot.errors(ours), aot.errors(ours)
    assert all(r.stats is not None and r.stats.registers for r in ours)  # ptxas reported


def test_a_compile_error_names_the_kernel_and_the_error(default_results):
    _, results = default_results
    broken = [r for r in results if r.name == BROKEN.name]
    assert len(broken) == len(aot.ARCHS) and all(r.error and "no_such_function" in r.error for r in broken)
    text = aot.errors(broken)
    assert "broken_kernel (sm_90)" in text and "broken_kernel (sm_80)" in text


def _hf_runs() -> list[Callable[[], Any]]:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    tiny = {"num_hidden_layers": 1, "num_attention_heads": 4, "hidden_size": 32, "intermediate_size": 64}
    models: list[tuple[Any, dict[str, Any]]] = []
    ids = torch.randint(3, 96, (2, 8))
    gpt2 = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=1, n_head=4, n_positions=64)
    gpt2._attn_implementation = "eager"
    models.append((lambda: transformers.GPT2LMHeadModel(gpt2), {"input_ids": ids, "labels": ids}))
    llama = transformers.LlamaConfig(vocab_size=96, num_key_value_heads=2, max_position_embeddings=64, **tiny)
    llama._attn_implementation = "eager"
    models.append((lambda: transformers.LlamaForCausalLM(llama), {"input_ids": ids, "labels": ids}))
    bert = transformers.BertConfig(vocab_size=96, max_position_embeddings=64, **tiny)
    models.append((lambda: transformers.BertForMaskedLM(bert), {"input_ids": ids, "labels": ids}))
    vit = transformers.ViTConfig(image_size=16, patch_size=4, num_labels=5, **tiny)
    models.append(
        (lambda: transformers.ViTForImageClassification(vit), {"pixel_values": torch.randn(2, 3, 16, 16), "labels": torch.arange(2)})
    )

    def train(build: Callable[[], Any], kwargs: dict[str, Any]) -> Callable[[], Any]:
        def run() -> None:  # eval(): no dropout, so no random ops falling back
            conveyor.compile(build().eval(), backend="triton")(**kwargs).loss.backward()

        return run

    return [train(b, kw) for b, kw in models]


@pytest.mark.slow
def test_more_modules_shapes_and_hf_models_compile():
    runs: list[Callable[[], Any]] = [*(_module(make, shape) for _, make, shape in MODELS)]
    runs += [_module(make, (3, 64, 16)) for name, make, _ in MODELS if name in ("norm_block", "transformer_encoder_layer")]
    runs += [_half_block(torch.float16), _program(CASES[4][0], lambda: (torch.randn(2, 5000),))]
    runs += _hf_runs()
    recorder = _record(runs)
    results = _compile_all(recorder)
    assert not aot.errors(results), aot.errors(results)

# Note [Tests run once in CI]: this module checks machinery that is the same on every torch;
# .ci/run's second torch leaves it out (-m "not once")
pytestmark = pytest.mark.once
