"""``torch.compile(model, backend="conveyor")``: the dynamo backend.

Registered through the ``torch_dynamo_backends`` entry point. Dynamo hands us
a torch-level FX graph and example inputs; we compile at lowering time, with
dynamo's fake mode and shape environment (so guards our tracing adds reach
dynamo's guard set). Dynamo guards sizes and strides itself; at run time we
check only what dynamo does not: grad mode, which inputs share storage, and
what stages specialize on. A different answer compiles again, with static
shapes, for that pattern.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch
import torch.fx
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from conveyor import cache
from conveyor.capture import trace_user
from conveyor.config import resolve
from conveyor.pipeline import Pipeline, StageGraph
from conveyor.stage import CompiledFn, Request

_last_graphs: list[tuple[StageGraph, ...]] = [()]


def last_dynamo_graphs() -> tuple[StageGraph, ...]:
    """The stage graphs of the graph dynamo most recently ran through conveyor."""
    if not _last_graphs[0]:
        raise ValueError("last_graphs: nothing has been compiled by torch.compile(backend='conveyor') yet")
    return _last_graphs[0]


class DynamoCompiled:
    """What dynamo calls in place of its graph."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], pipeline: Pipeline) -> None:
        self.gm = gm
        self.pipeline = pipeline
        fake_mode = detect_fake_mode(example_inputs) or FakeTensorMode()
        fakes = [_fakeify(x, fake_mode) for x in example_inputs]
        # the specialization dynamo compiled for: any sizes dynamo's guards allow
        self._lowered_key = self._key(fakes, shapes=False)
        self._lowered = self._compile(fakes, fake_mode)
        # other grad modes / aliasing patterns: compiled statically, keyed by shapes too
        self._static: dict[Hashable, tuple[CompiledFn, tuple[StageGraph, ...]]] = {}

    def _key(self, flat: Sequence[Any], shapes: bool) -> Hashable:
        stage_keys = tuple(s.cache_key(flat) for s in self.pipeline.stages if s.cache_key is not None)
        values = tuple(x for x in flat if not isinstance(x, torch.Tensor)) if shapes else ()
        return (cache.call_key(flat, shapes=shapes), stage_keys, values)

    def _compile(self, fakes: Sequence[Any], fake_mode: Any) -> tuple[CompiledFn, tuple[StageGraph, ...]]:
        gm = self.gm

        def flat_fn(*args: Any) -> tuple[Any, ...]:
            out = gm(*args)
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)

        graph = trace_user(flat_fn, fakes, fake_mode)
        request = Request(graph, tuple(fakes), fake_mode, torch.is_grad_enabled())
        return self.pipeline.compile(request)

    def __call__(self, *args: Any) -> Sequence[Any]:
        if self._key(args, shapes=False) == self._lowered_key:
            entry = self._lowered
        else:
            key = self._key(args, shapes=True)
            entry = self._static.get(key)  # type: ignore[assignment]
            if entry is None:
                fake_mode = FakeTensorMode()
                fakes = [_fakeify(x, fake_mode, static=True) for x in args]
                entry = self._static[key] = self._compile(fakes, fake_mode)
        _last_graphs[0] = entry[1]
        return entry[0](list(args))


def _fakeify(x: Any, fake_mode: Any, static: bool = False) -> Any:
    if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor):
        return fake_mode.from_tensor(x, static_shapes=static) if static else fake_mode.from_tensor(x)
    return x


def conveyor_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: dict[str, Any] | None = None
) -> DynamoCompiled:
    """The dynamo backend function (``torch._dynamo.list_backends()`` lists it)."""
    return DynamoCompiled(gm, example_inputs, Pipeline(resolve(options or {})))
