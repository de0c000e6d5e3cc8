"""Which inputs a program mutates and how its outputs alias: one functional run.

A smaller, readable cousin of torch's
``run_functionalized_fw_and_collect_metadata``
(``torch/_functorch/_aot_autograd/collect_metadata_analysis.py``): run the
graph once on functional wrappers of the fake inputs, then read each input
wrapper's mutation flags and classify each output by identity and storage.
The program record (``conveyor.analysis.program.Program.analysis``) calls it at most
once per graph; stages read the record. :func:`read_run` reads the same facts
from a functional run made elsewhere (a stage's trace: Note [One functional
run] in ``conveyor.analysis.program``).

Functionalization wraps each input separately, so the flags of an input are
what the program does through that input, also when inputs share a storage
(whether that is allowed is the reading stage's business).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef

from conveyor.analysis.functional_run import FunctionalRun, run_functional
from conveyor.analysis.program_meta import InputInfo, OutputInfo, OutputKind, ProgramMeta


@dataclass(frozen=True)
class Analysis:
    """The program's :class:`ProgramMeta` and the functional run it was read
    from (a stage takes the metadata of mutated inputs and aliased outputs
    from the run's fake functional tensors)."""

    meta: ProgramMeta
    run: FunctionalRun


def analyze(graph: torch.fx.GraphModule, inputs: Sequence[Any], fake_mode: Any) -> Analysis:
    """Collect :class:`ProgramMeta` for ``graph`` called on ``inputs``.

    :param graph: a flat aten graph (placeholders are the inputs, the output
        node returns a tuple); it may contain in-place ops and views.
    :param inputs: one fake value per placeholder (fake tensors keep the real
        inputs' storage sharing).
    :param fake_mode: the fake mode of ``inputs``.

    Run it under the grad mode the program will run under.
    """
    inputs = tuple(inputs)
    with fake_mode:
        run = run_functional(graph, inputs)
    return read_run(inputs, run)


def read_run(inputs: Sequence[Any], run: FunctionalRun) -> Analysis:
    """The :class:`Analysis` of ``run``, a functional run of a program on
    ``inputs`` (its fake inputs) or on stand-ins of them (same metadata,
    storage, ``requires_grad`` and leafness: a trace's, Note [Tracing on
    stand-ins]). The run must be the program's own, each node under its
    captured grad mode, with no write of the runner's: the mutation flags
    are read from its wrappers."""
    inputs = tuple(inputs)
    infos = _with_swap_targets(
        tuple(_input_info(arg, f, g) for arg, f, g in zip(inputs, run.f_inputs, run.grad_fns_before)), run
    )
    outputs, num_bases = _classify_outputs(run, infos)
    return Analysis(ProgramMeta(infos, outputs, num_bases), run)


def _storage(t: torch.Tensor) -> StorageWeakRef | None:
    return StorageWeakRef(t.untyped_storage()) if t.layout is torch.strided else None


def _input_info(arg: Any, f_arg: Any, grad_fn_before: Any) -> InputInfo:
    if not isinstance(arg, torch.Tensor):
        return InputInfo()
    elem = f_arg.elem
    after = torch._from_functional_tensor(elem)
    storage_changed = bool(torch._functionalize_was_storage_changed(elem)) and _storage(arg) != _storage(after)
    metadata_changed = bool(torch._functionalize_has_metadata_mutation(elem)) and (
        after.size() != arg.size() or after.stride() != arg.stride() or after.storage_offset() != arg.storage_offset()
    )
    # an out= argument of the wrong size is resized with no metadata flag set
    metadata_changed = metadata_changed or (
        bool(torch._functionalize_has_data_mutation(elem))  # type: ignore[attr-defined]  # bound at runtime, missing from torch's stubs
        and after.size() != arg.size()
    )
    mutates_data = bool(torch._functionalize_has_data_mutation(elem)) and not storage_changed  # type: ignore[attr-defined]  # as above
    # the functional wrapper runs below nothing but above autograd: a write
    # autograd did not record (``a.detach().mul_(2)``, a write under
    # ``no_grad``) leaves its grad_fn as it was; eager's input keeps its
    # autograd identity then too
    hidden = bool(torch._functionalize_are_all_mutations_hidden_from_autograd(elem)) or (
        mutates_data and arg.requires_grad and f_arg.grad_fn is grad_fn_before
    )
    return InputInfo(
        mutates_data=mutates_data,
        mutates_metadata=storage_changed or metadata_changed,
        mutates_storage=storage_changed,
        mutations_under_no_grad=mutates_data
        and bool(torch._functionalize_are_all_mutations_under_no_grad_or_inference_mode(elem)),
        mutations_hidden_from_autograd=(mutates_data or storage_changed or metadata_changed) and hidden,
        requires_grad=arg.requires_grad,
        is_leaf=arg.is_leaf,
    )


def _with_swap_targets(infos: tuple[InputInfo, ...], run: FunctionalRun) -> tuple[InputInfo, ...]:
    """Fill ``swapped_onto`` for inputs ``set_`` onto another input's storage
    (the functional wrappers' inner tensors then share a storage)."""
    unswapped: dict[StorageWeakRef | None, int] = {
        ref: j
        for j, f in reversed(list(enumerate(run.f_inputs)))
        if isinstance(f, torch.Tensor) and not infos[j].mutates_storage and (ref := _storage(cast(Any, f).elem)) is not None  # a FunctionalTensor
    }
    return tuple(
        dataclasses.replace(info, swapped_onto=unswapped.get(_storage(run.f_inputs[i].elem)))
        if info.mutates_storage
        else info
        for i, info in enumerate(infos)
    )


def _classify_outputs(run: FunctionalRun, infos: tuple[InputInfo, ...]) -> tuple[tuple[OutputInfo, ...], int]:
    """One :class:`OutputInfo` per output, and the number of intermediate bases."""
    input_of_storage: dict[StorageWeakRef, int] = {}
    for i, f in enumerate(run.f_inputs):
        if isinstance(f, torch.Tensor) and not infos[i].mutates_storage and (ref := _storage(f)) is not None:
            input_of_storage.setdefault(ref, i)
    outs = run.f_outputs
    result: list[OutputInfo | None] = [None] * len(outs)
    groups: dict[StorageWeakRef | None, list[int]] = {}  # outputs viewing intermediates, by storage
    for k, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            result[k] = OutputInfo(OutputKind.FRESH, is_tensor=False)
            continue
        rg = o.requires_grad
        same_input = next((i for i, f in enumerate(run.f_inputs) if f is o), None)
        same_output = next((j for j in range(k) if outs[j] is o), None)
        if same_input is not None:
            result[k] = OutputInfo(OutputKind.IS_INPUT, same_input, rg)
        elif same_output is not None:
            result[k] = OutputInfo(OutputKind.IS_OUTPUT, same_output, rg)
        elif (ref := _storage(o)) in input_of_storage:
            result[k] = OutputInfo(OutputKind.VIEW_OF_INPUT, input_of_storage[ref], rg)
        else:
            groups.setdefault(ref, []).append(k)
    num_bases = 0
    for members in groups.values():
        # a root that requires grad first: the others are rebuilt from it, and one rebuilt
        # from a detached root (``y.detach()`` returned beside ``y``) would lose its gradient
        roots = sorted((k for k in members if outs[k]._base is None), key=lambda k: not outs[k].requires_grad)
        if roots and not outs[roots[0]].requires_grad:
            # every root is detached (``a.detach()`` returned beside ``a``, a view of an
            # intermediate): the first member that requires grad is computed instead
            roots = [k for k in members if outs[k].requires_grad][:1] or roots
        if roots:
            root = roots[0]
            for k in members:
                if k != root:
                    result[k] = OutputInfo(OutputKind.ALIAS_OF_OUTPUT, root, outs[k].requires_grad)
                else:
                    kind = OutputKind.FRESH if outs[k]._base is None else OutputKind.VIEW_OF_INTERMEDIATE
                    result[k] = OutputInfo(kind, None, outs[k].requires_grad)
        elif len(members) == 1:
            result[members[0]] = OutputInfo(OutputKind.VIEW_OF_INTERMEDIATE, None, outs[members[0]].requires_grad)
        else:
            for k in members:
                result[k] = OutputInfo(OutputKind.VIEW_OF_SHARED_INTERMEDIATE, num_bases, outs[k].requires_grad)
            num_bases += 1
    return tuple(r for r in result if r is not None), num_bases
