"""The ``cuda_graphs`` option: a program's launches recorded once into a CUDA
graph and replayed (Note [CUDA graphs]).

Note [CUDA graphs]
~~~~~~~~~~~~~~~~~~
A small model on a GPU is bound by launches: each kernel and aten call costs
a few microseconds of Python and driver time, more than its work on the GPU.
With ``stages={"triton": {"cuda_graphs": True}}`` the backend records a
program's launches into one CUDA graph and replays it, as
``torch.compile(mode="reduce-overhead")`` does. The rules a user of that mode
knows hold, with two differences that keep every result eager's:

* **When.** The first call runs the program as usual (its kernels compile,
  tune and bind); the second records, after one run on a side stream; later
  calls replay. Only a program whose tensor inputs are all on CUDA, whose
  graph writes no input, with static sizes (a symbolic graph's per-size
  programs run without), is recorded.
* **Static inputs.** An input whose memory is where it was at the call
  before (parameters, buffers, a tensor passed again) is read in place, and
  the graph keeps it alive. Any other input is copied into a buffer the
  graph owns before each replay (``copy_``, whatever its layout). If a
  static input moves, the program records again with that input copied
  from then on (a batch that the allocator happened to place where the
  last one was, say); if a non-tensor input changes, it records again.
  After :data:`MAX_RECORDINGS` it runs without a graph, warned.
* **Outputs are fresh tensors**, not the graph's own memory, which the next
  replay overwrites (``reduce-overhead`` hands out that memory and asks the
  user to clone). After each replay the memory of the graph's outputs is
  copied once per storage, and the outputs are made as views of the copies,
  so outputs that share memory share it as in eager. An output that is an
  input or a view of one is made as that view of the caller's tensor (the
  forward of a training step returns saved inputs); where the caller's
  tensor is laid out otherwise than the recorded one, that call runs without
  the graph.
* **What cannot be recorded** (an aten step that reads a value on the host,
  a data-dependent size, a CPU tensor) fails the recording: the program
  runs without a graph from then on, warned with the cause. Random ops are
  recorded with the generator's state, as in ``torch.cuda.graph``: their
  values are random as eager's, though not eager's sequence (the recording
  runs the program twice more), as under ``reduce-overhead``.

:func:`capture` is the one place that touches ``torch.cuda.CUDAGraph``; the
tests on CPU replace it by a stand-in that runs the program again and copies
its results into the recorded outputs, which is what a replay does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from conveyor.stage_api import span

#: recordings of one program before it runs without a graph
MAX_RECORDINGS = 4
#: the device types whose programs are recorded (the tests on CPU add "cpu", with a stand-in :func:`capture`)
DEVICES: tuple[str, ...] = ("cuda",)


def capture(run: Callable[[], list[Any]]) -> tuple[Callable[[], None], list[Any]]:
    """Record ``run`` into a CUDA graph after one warm-up run on a side
    stream; return the graph's replay and the outputs the recording made
    (the graph's memory, which each replay writes again)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = run()
    return graph.replay, outs


def _span(t: torch.Tensor) -> torch.Tensor:
    """The memory ``t`` reaches, from its first element to its last, flat."""
    return t.as_strided((span(t.shape, t.stride()),), (1,))


def _fresh(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in new memory with ``t``'s sizes and strides (a buffer
    the graph owns, for an input copied in at each replay)."""
    if t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    return _span(t).clone().as_strided(t.shape, t.stride())


def _overlaps(t: torch.Tensor) -> bool:
    """Whether elements of ``t`` share memory (an expanded input): a buffer laid
    out so is filled through its span, from a value with the same strides."""
    return any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride(), strict=True)) or _span(t).numel() < t.numel()


def _copy_into(buffer: torch.Tensor, value: torch.Tensor) -> None:
    if value.stride() == buffer.stride():
        _span(buffer).copy_(_span(value))  # one flat copy; the only one an overlapping buffer takes
    else:
        buffer.copy_(value)


@dataclass(frozen=True)
class _Out:
    """How one output is made after a replay: ``value`` (not a tensor), a
    view of input ``input`` (offset relative to it), or a view of the copy of
    the graph's storage ``storage``."""

    value: Any = None
    input: int = -1
    storage: int = -1
    size: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    offset: int = 0


def _plan(outputs: Sequence[Any], reads: Sequence[Any]) -> tuple[tuple[_Out, ...], list[torch.Tensor]] | str:
    """How each output is made after a replay, and the graph's storages they
    view (as flat tensors); or why they cannot be made."""
    by_input = {r.untyped_storage().data_ptr(): i for i, r in enumerate(reads) if isinstance(r, torch.Tensor)}
    storages: list[torch.Tensor] = []
    by_storage: dict[int, int] = {}
    plan = []
    for o in outputs:
        if not isinstance(o, torch.Tensor):
            plan.append(_Out(value=o))
            continue
        ptr = o.untyped_storage().data_ptr()
        if ptr in by_input:
            r = reads[by_input[ptr]]
            if r.dtype != o.dtype:
                return "an output views an input as another dtype"
            offset = o.storage_offset() - r.storage_offset()
            plan.append(_Out(input=by_input[ptr], size=tuple(o.shape), stride=o.stride(), offset=offset))
            continue
        if ptr not in by_storage:
            by_storage[ptr] = len(storages)
            elements = o.untyped_storage().nbytes() // o.element_size()
            storages.append(torch.empty(0, dtype=o.dtype, device=o.device).set_(o.untyped_storage(), 0, (elements,)))  # type: ignore[call-overload]
        flat = storages[by_storage[ptr]]
        if flat.dtype != o.dtype:
            return "outputs view one memory as two dtypes"
        plan.append(
            _Out(storage=by_storage[ptr], size=tuple(o.shape), stride=o.stride(), offset=int(o.storage_offset()))
        )
    return tuple(plan), storages


@dataclass
class _Recording:
    """One recording: the replay, what the graph reads, how outputs are made."""

    replay: Callable[[], None]
    #: per input: the tensor the graph reads in place (static), a buffer it owns (copied into), or the value
    reads: tuple[Any, ...]
    copied: tuple[bool, ...]
    outputs: tuple[_Out, ...]
    #: the graph's memory the outputs view, as flat tensors
    storages: list[torch.Tensor]

    def results(self, args: Sequence[Any]) -> list[Any] | None:
        """The outputs of the replay that just ran for ``args``: copies of the
        graph's memory, and views of ``args`` (None where an input they view is
        laid out otherwise than the recorded one)."""
        copies = [flat.clone() for flat in self.storages]
        made = []
        for out in self.outputs:
            if out.storage >= 0:
                made.append(copies[out.storage].as_strided(out.size, out.stride, out.offset))
            elif out.input >= 0:
                arg, read = args[out.input], self.reads[out.input]
                if arg.stride() != read.stride():
                    return None
                same = out.offset == 0 and out.size == tuple(arg.shape) and out.stride == arg.stride()
                made.append(arg if same else arg.as_strided(out.size, out.stride, arg.storage_offset() + out.offset))
            else:
                made.append(out.value)
        return made


class GraphedProgram:
    """A :class:`~conveyor_triton.program.Program` run through a CUDA graph
    (Note [CUDA graphs])."""

    def __init__(self, program: Any, label: str) -> None:
        self.program = program
        self.label = label
        self._last: tuple[int, ...] | None = None  # the input addresses of the call before a recording
        self._moved: set[int] = set()  # inputs copied from now on: they moved once
        self._recording: _Recording | None = None
        self._recordings = 0
        self._plain = False

    def __getstate__(self) -> dict[str, Any]:
        # Note [Picklable run-time callables]: a graph and its buffers are made again after a load
        return {"program": self.program, "label": self.label}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["program"], state["label"])  # type: ignore[misc]

    @property
    def recorded(self) -> bool:
        """Whether calls replay a recording now."""
        return self._recording is not None

    def __call__(self, args: list[Any]) -> list[Any]:
        if self._plain:
            return self.program(args)  # type: ignore[no-any-return]
        rec = self._recording
        if rec is None and self._last is None:  # the first call: compile, tune and bind as usual
            self._last = _addresses(args)
            return self.program(args)  # type: ignore[no-any-return]
        if rec is not None and not _replayable(rec, args, self._moved):
            self._last, self._recording, rec = _addresses(rec.reads), None, None
        if rec is None:
            return self._record(args)
        for value, read, copied in zip(args, rec.reads, rec.copied, strict=True):
            if copied:
                _copy_into(read, value)
        rec.replay()
        return self._results(rec, args)

    def _results(self, rec: _Recording, args: list[Any]) -> list[Any]:
        made = rec.results(args)
        if made is None:  # an input an output views is laid out otherwise: this call runs without the graph
            return self.program(args)  # type: ignore[no-any-return]
        args.clear()  # Note [Flat calling convention]: the callee frees its inputs
        return made

    def _record(self, args: list[Any]) -> list[Any]:
        if self._recordings >= MAX_RECORDINGS:
            return self._give_up(args, f"its static inputs moved {MAX_RECORDINGS} times")
        self._recordings += 1
        last = self._last or ()
        copied = tuple(
            isinstance(a, torch.Tensor) and (i in self._moved or i >= len(last) or a.data_ptr() != last[i])
            for i, a in enumerate(args)
        )
        reads = tuple(_fresh(a) if c else a for a, c in zip(args, copied, strict=True))
        try:
            replay, outputs = capture(lambda: self.program(list(reads)))
        except Exception as exc:  # what cannot be recorded runs as before
            return self._give_up(args, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        plan = _plan(outputs, reads)
        if isinstance(plan, str):
            return self._give_up(args, plan)
        self._recording = rec = _Recording(replay, reads, copied, *plan)
        rec.replay()  # the recording itself ran nothing: this call's results
        return self._results(rec, args)

    def _give_up(self, args: list[Any], why: str) -> list[Any]:
        warnings.warn(
            f"conveyor triton cuda_graphs: {self.label} runs without a CUDA graph: {why}", RuntimeWarning, stacklevel=3
        )
        self._plain, self._recording = True, None
        return self.program(args)  # type: ignore[no-any-return]


def _addresses(args: Sequence[Any]) -> tuple[int, ...]:
    return tuple(a.data_ptr() if isinstance(a, torch.Tensor) else -1 for a in args)


def _replayable(rec: _Recording, args: Sequence[Any], moved: set[int]) -> bool:
    """Whether ``args`` can run through ``rec``: every static input where the
    graph reads it (one that moved is added to ``moved``), every non-tensor
    input equal."""
    if len(args) != len(rec.reads):
        return False
    for i, (value, read, copied) in enumerate(zip(args, rec.reads, rec.copied, strict=True)):
        if isinstance(read, torch.Tensor):
            if not isinstance(value, torch.Tensor) or value.shape != read.shape or value.dtype != read.dtype:
                return False
            if copied and value.stride() != read.stride() and _overlaps(read):
                return False  # recorded again, with a buffer laid out as this value
            if not copied and (value.data_ptr() != read.data_ptr() or value.stride() != read.stride()):
                moved.add(i)
                return False
        elif type(value) is not type(read) or value != read:
            return False
    return True


def graphs_apply(inputs: Sequence[Any], mutating: bool, per_size: bool) -> str | None:
    """Why a program over ``inputs`` is not recorded, or None when it is."""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    if per_size:
        return "its graph has symbolic sizes"
    if mutating:
        return "its graph writes to tensors"
    if not tensors or any(t.device.type not in DEVICES for t in tensors):
        return "not every tensor input is on CUDA"
    return None
