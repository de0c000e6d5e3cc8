"""PyTorch's own compiled-autograd and hook programs, through conveyor's
forward (``conveyor.compile``, ``torch.compile(backend="conveyor")``) and
backward (``conveyor_compiled_autograd.enable()``), checked against eager:
values, gradients, and which hooks fired, in which order, with what.

The programs and the harness: ``ca_program_harness`` and the catalogues it
names. ``KNOWN`` lists the runs that differ from eager: conveyor's open bugs
(``xfail(strict=True)``: a fix makes them pass, and the entry must go) and the
runs where torch's own counterpart (``torch.compile(backend="aot_eager")``,
torch's compiled autograd) differs from eager in the same way (skipped, with
the reason). The default run checks a representative handful; ``--runslow``
runs every program in every mode, and a subset through the inductor backend.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the catalogues (--import-mode=importlib)
import autograd_grad_programs  # noqa: E402, F401  (registers its programs)
import autograd_hook_programs  # noqa: E402, F401
import ca_program_harness as h  # noqa: E402
import checkpoint_hook_programs  # noqa: E402, F401  (and backward_hop_programs)
import compiled_autograd_programs  # noqa: E402, F401
import hook_programs  # noqa: E402, F401

MODES = [(f, b) for f in h.FORWARDS for b in h.BACKWARDS if (f, b) != ("eager", "engine")]

B6 = "a tensor hook on an output of a compiled program whose gradient is undefined (None) is not called (h_sweep3 B6)"
SAVES = ("the compiled region saves what its partition saves, so pack/unpack run another number of times than in "
         "eager, as under torch.compile(backend='aot_eager'); no hook sees a FakeTensor (h_sweep3 B7, fixed)")
B8 = ("under compiled autograd the hooks of two leaves fed by one compiled region fire in another order than "
      "in eager and torch's compiled autograd (h_sweep3 B8)")
REFUSED = "higher-order gradients through a compiled program: a loud refusal, as torch.compile's"
TORCH_ORDER = "torch's compiled autograd (aot_eager) differs alike: hook order / values in one captured graph"
TORCH_DYNAMO = "torch.compile(backend='aot_eager') differs from eager alike (torch's behaviour)"

CK_LIST = ("a reentrant checkpoint returning tensors in a list: eager computes them under no_grad, dynamo's "
           "tag_activation_checkpoint differentiates them; torch.compile(backend='aot_eager') alike")
CK_TWICE = ("two autograd.grad calls inside the program through one compiled region, without retain_graph: "
            "aot_eager raises 'backward through the graph a second time' alike (conveyor: a TypeError, its saved "
            "values freed)")
CK_NESTED = ("conveyor.compile of a program running autograd.grad (split by dynamo) whose non-reentrant checkpoint "
             "calls a conveyor.compile'd function: the backward gets no saved values (TypeError) (h_ckpt C5)")

_ANY_BW = h.BACKWARDS


def _known() -> dict[tuple[str, str, str], tuple[str, str]]:
    """(program, forward, backward) -> (kind, why): kind "bug" (conveyor's, open), "refused" (a loud
    refusal torch.compile makes too) or "torch" (torch's counterpart differs from eager alike)."""
    known: dict[tuple[str, str, str], tuple[str, str]] = {}

    def add(kind: str, why: str, forwards: tuple[str, ...], backwards: tuple[str, ...], *names: str) -> None:
        for name in names:
            assert name in h.PROGRAMS, name
            for f in forwards:
                for b in backwards:
                    known[(name, f, b)] = (kind, why)

    add("bug", B6, ("conveyor", "dynamo"), _ANY_BW, "grad_nonleaf_unbind_hook")
    add("torch", SAVES, ("conveyor", "dynamo"), _ANY_BW, "saved_tensor_hooks")
    add("refused", REFUSED, ("conveyor", "dynamo"), _ANY_BW, "hessian_vector_create_graph", "double_backward_grad")
    add("refused", REFUSED, ("conveyor", "dynamo"), ("ca",), "accumulate_grad_create_graph")
    add("torch", TORCH_ORDER, ("eager",), ("ca",), "grad_nonleaf_unbind_hook")
    add("torch", TORCH_DYNAMO, ("dynamo",), _ANY_BW, "forward_hook_added_after_compile",
        "grad_fn_prehooks_multiple_outputs")
    # a program that registers hooks or retains gradients compiles through dynamo on both entry points
    add("torch", TORCH_DYNAMO, ("conveyor", "dynamo"), _ANY_BW, "retains_grad_inplace_multiple_outputs")
    add("torch", TORCH_DYNAMO, ("dynamo",), ("engine",), "hook_on_intermediate_in_containers")
    add("torch", TORCH_DYNAMO, ("conveyor", "dynamo"), ("engine",), "hook_on_intermediate_used_before_and_after")
    add("torch", TORCH_DYNAMO, ("conveyor", "dynamo"), ("engine",), "hooks_counter_and_modify")
    add("torch", TORCH_ORDER, ("eager", "conveyor", "dynamo"), ("ca",), "post_acc_grad_hook_ordering",
        "node_post_hook_registered_in_unpack")
    add("torch", TORCH_ORDER, ("eager", "conveyor", "dynamo"), ("ca",), "tensor_hooks_inplace_multiple_outputs")
    add("bug", B8, ("conveyor", "dynamo"), ("ca",), "hooks_counter_and_modify")
    # checkpointing (checkpoint_hook_programs; /work/reports/s13/h_ckpt.md)
    add("torch", CK_LIST, ("dynamo",), _ANY_BW, "ckpt_list_inputs")
    add("torch", CK_TWICE, ("dynamo",), _ANY_BW, "joint_graph_passes_view_and_permute",
        "user_phase_annotation_with_extra_autograd_grad")
    add("bug", CK_NESTED, ("conveyor",), ("engine",), "checkpoint_recompute_calls_compiled_function")
    return known


KNOWN = _known()

#: the default run: a representative program of each kind, in every mode (h_sweep3's B1 and B2, hooks dropped
#: when registered inside a compiled program, were fixed by 242e853: these programs pass since)
FAST = ("basic", "queued_callback", "register_hook_input_with_outputs", "prehook_ordering", "saved_tensor_hooks")


def _check(name: str, forward: str, backward: str, backend: str = "eager") -> None:
    kind, why = KNOWN.get((name, forward, backward), (None, ""))
    if kind == "torch":
        pytest.skip(why)
    expected, actual = h.outcome(name, forward, backward, backend)
    if kind == "refused":
        assert isinstance(actual.error, RuntimeError) and "not supported" in str(actual.error), actual.error
        return
    h.compare(expected, actual, backend)


def _params(names: tuple[str, ...] | list[str]) -> list[object]:
    out = []
    for name in names:
        for f, b in MODES:
            kind, why = KNOWN.get((name, f, b), (None, ""))
            marks = [pytest.mark.xfail(strict=True, reason=why)] if kind == "bug" else []
            out.append(pytest.param(name, f, b, marks=marks, id=f"{name}-{f}-{b}"))
    return out


@pytest.mark.parametrize(("name", "forward", "backward"), _params(FAST))
def test_representative_program(name: str, forward: str, backward: str) -> None:
    _check(name, forward, backward)


#: one run of each open bug but B8 (a slow one), in the default run (B3, B4, B5, B7 fixed), so that a fix shows at once (remove its KNOWN entries then)
BUG_RUNS = (
    ("grad_nonleaf_unbind_hook", "conveyor", "engine"),  # B6
    ("checkpoint_recompute_calls_compiled_function", "conveyor", "engine"),  # h_ckpt C5
)  # B8: hooks_counter_and_modify (slow)



@pytest.mark.parametrize(("name", "forward", "backward"), [
    pytest.param(*run, marks=pytest.mark.xfail(strict=True, reason=KNOWN[run][1]), id="-".join(run)) for run in BUG_RUNS
])
def test_open_bug(name: str, forward: str, backward: str) -> None:
    _check(name, forward, backward)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "forward", "backward"), _params(sorted(set(h.PROGRAMS) - set(FAST))))
def test_every_program(name: str, forward: str, backward: str) -> None:
    _check(name, forward, backward)


#: through Inductor: one program of each kind, both entry points, under compiled autograd
INDUCTOR = ("basic", "custom_fn_saved_tensors", "prehook_ordering", "module_full_backward_hooks", "saved_tensor_hooks")


@pytest.mark.slow
@pytest.mark.parametrize(("name", "forward", "backward"), [
    p for p in _params(INDUCTOR) if p.values[1] != "eager" and p.values[2] == "ca"  # type: ignore[attr-defined]
])
def test_program_through_inductor(name: str, forward: str, backward: str) -> None:
    pytest.importorskip("torch._inductor")
    _check(name, forward, backward, backend="inductor")


def test_catalogue_is_whole() -> None:
    """Every program is registered once, with its origin upstream."""
    assert len(h.PROGRAMS) >= 90
    assert all(p.origin.startswith("test/") for p in h.PROGRAMS.values())
