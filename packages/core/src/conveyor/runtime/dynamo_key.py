"""A dynamo graph's disk cache entry found before conveyor captures it.

Note [Keyed before capture]: behind dynamo, the disk cache's key (Note [The
disk cache key] in :mod:`conveyor.runtime.disk_key`) is computed over the
graph conveyor's capture makes of dynamo's graph, so a warm process still
traces dynamo's graph to aten (0.12-0.16 s and some 10k objects on the
benchmark's six-block training step) only to find the program it stored.
``torch.compile(m)``'s own warm path keys AOTAutograd's cache on dynamo's
graph instead. So a dynamo graph gets a key of its own, computed before
capture, and a small pointer file from it to the program's entry
(``<cache_dir>/<key[:2]>/<key>.dynamo``: magic, this key, the program's
key), written when a capture and compile of that graph went through the
disk cache without a warning. A later process whose dynamo graph has the
same key loads the entry the pointer names (checked against its own key,
as any entry) and does not capture.

The key must hold everything capture reads, so that two graphs with one
key capture to one program:

* what the program key holds of the pipeline and the environment (the
  versions and, for editable installs, the sources of conveyor and every
  stage: capture's own code), the stages' ``cache_key`` for the inputs, and
  each input's metadata and storage sharing;
* dynamo's graph: its code, the plain-data part of each node's ``meta``
  (capture's graph inherits node metadata from it), and no attribute: a
  graph with ``get_attr`` or ``call_module`` nodes (parameters it holds, a
  higher-order op's subgraphs, a module dynamo did not inline) is not keyed,
  so no closed-over tensor or module state escapes the key. Every function
  it calls must be torch's, Python's ``operator`` or ``math``, or an aten or
  prims operator: torch's version then says what it does. A user function
  dynamo put in the graph (``allow_in_graph``), a custom operator or a
  higher-order operator is traced into by capture, so such a graph is not
  keyed;
* the process state capture's ops may read: grad mode, autocast, inference
  mode, default dtype, deterministic algorithms (the program key's), and
  the switches a decomposition chooses by (scaled-dot-product attention's
  backends, matmul precision, ``opt_einsum``, cuDNN and oneDNN), which
  ``torch.compile``'s own AOTAutograd cache does not all key on.

A graph that is not keyed (the reason at debug level in the
``conveyor.disk_cache`` log) is captured as before, and its program still
goes through the disk cache by the program key.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import operator
import types
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor

from conveyor.protocol.config import Config
from conveyor.runtime import disk_cache, disk_key, stored_graphs
from conveyor.runtime.files import may_read, may_write, write_atomic

log = logging.getLogger("conveyor.disk_cache")
info = logging.getLogger("conveyor")

_MAGIC = b"conveyor-dynamo-key\n"
_WHAT = "compile cache"
#: modules whose functions a dynamo graph may call and still be keyed (and torch's own, below)
_PYTHON_MODULES = frozenset({"_operator", "operator", "math", "builtins"})
#: torch modules whose functions call back into user code (hooks, higher-order operators)
_TORCH_EXCLUDED = ("torch._dynamo", "torch._higher_order_ops", "torch.utils.checkpoint", "torch.autograd.function")
#: operator namespaces whose kernels torch's version fixes
_OP_NAMESPACES = frozenset({"aten", "prims"})
#: the input types keyed (a fake stands for a plain tensor: Note [Tensor subclasses] for the others)
_PLAIN_TENSORS = frozenset({FakeTensor, torch.Tensor, torch.nn.Parameter, torch.nn.Buffer})


@dataclass(frozen=True)
class Precapture:
    """The key of one dynamo graph before capture (``key`` ``None``: not keyed).

    :ivar config: the pipeline's configuration (where its cache is).
    :ivar inputs: how many inputs the program takes.
    """

    config: Config
    key: str | None
    inputs: int

    @staticmethod
    def of(pipeline: Any, gm: torch.fx.GraphModule, inputs: Sequence[Any], grad_enabled: bool) -> Precapture:
        """The key of capturing ``gm`` for ``inputs`` (fake, as capture gets
        them) under ``grad_enabled``."""
        config: Config = pipeline.config
        if not config.cache:
            return Precapture(config, None, len(inputs))
        key, why = precapture_key(pipeline, gm, inputs, grad_enabled)
        if key is None:
            log.debug("dynamo graph not keyed before capture: %s", why)
        return Precapture(config, key, len(inputs))

    def load(self) -> disk_cache.Loaded | None:
        """The program stored for this key, or ``None``."""
        if self.key is None:
            return None
        root = disk_cache.cache_dir(self.config)
        pointer = pointer_path(root, self.key)
        if not may_read(root, pointer, _WHAT):
            return None
        try:
            data = pointer.read_bytes()
        except OSError:
            return None
        head = len(_MAGIC) + 32
        if len(data) != head + 32 or not data.startswith(_MAGIC) or data[len(_MAGIC) : head] != bytes.fromhex(self.key):
            log.debug("discarding %s: not a pointer for this key", pointer)
            _remove(pointer)
            return None
        program = data[head:].hex()
        path = disk_cache.entry_path(root, program)
        found = disk_cache.load(path, self.inputs, program)
        if found is None:
            return None
        info.info("disk cache hit %s (before capture, dynamo graph %s): loaded %s", program[:12], self.key[:12], path)
        stored_graphs.emit(found[1], str(path))  # Note [Structured trace]: as a hit after capture
        return found

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Around the capture and compile of the graph: when they loaded or
        stored one program through the disk cache and warned nothing, a
        pointer to it from this key (Note [Keyed before capture])."""
        if self.key is None:
            yield
            return
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught, disk_cache.recording() as keys:
                yield
        finally:
            for w in caught:  # outside the block: to the caller's filters and handlers
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        if len(keys) == 1 and not caught:
            self._point(keys[0])

    def _point(self, program: str) -> None:
        assert self.key is not None
        root = disk_cache.cache_dir(self.config)
        pointer = pointer_path(root, self.key)
        data = _MAGIC + bytes.fromhex(self.key) + bytes.fromhex(program)
        if not may_write(root, pointer, _WHAT):
            return
        try:
            if pointer.read_bytes() == data:
                return
        except OSError:
            pass
        try:
            write_atomic(pointer, data)
        except OSError as exc:
            log.debug("cannot write %s: %s", pointer, exc)


def pointer_path(directory: Path, key: str) -> Path:
    return directory / key[:2] / f"{key}.dynamo"


def precapture_key(
    pipeline: Any, gm: torch.fx.GraphModule, inputs: Sequence[Any], grad_enabled: bool
) -> tuple[str | None, str]:
    """``(key, "")`` for a dynamo graph capture may be skipped for, or
    ``(None, why)`` (Note [Keyed before capture])."""
    try:
        _check_calls(gm)
        _check_inputs(inputs)
        parts = (
            disk_key.FORMAT_VERSION,
            "before capture",
            *disk_key.pipeline_parts(pipeline),
            disk_key.stage_keys(pipeline, inputs),
            disk_key.global_part(grad_enabled, "forward"),
            _switches(),
            disk_key.inputs_part(inputs),
            disk_key.nodes_part(gm),
        )
    except disk_key.Unkeyable as exc:
        return None, str(exc)
    except Exception as exc:  # a graph the key does not understand is captured, never mis-served
        return None, f"{type(exc).__name__}: {exc}"
    return hashlib.sha256(repr(parts).encode()).hexdigest(), ""


def _check_calls(gm: torch.fx.GraphModule) -> None:
    """:class:`disk_key.Unkeyable` unless every node of ``gm`` is an input,
    the output, a method call or a call of a function whose code torch's or
    Python's version fixes."""
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "call_method"):
            continue
        if node.op != "call_function":
            raise disk_key.Unkeyable(f"node {node.name} is a {node.op} (state of the graph's own)")
        if not _fixed_function(node.target):
            raise disk_key.Unkeyable(f"node {node.name} calls {node.target!r}, whose code no version fixes")


def _fixed_function(target: Any) -> bool:
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace in _OP_NAMESPACES
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::", 1)[0] in _OP_NAMESPACES
    if isinstance(target, torch._ops.OperatorBase):  # a higher-order operator: it runs a subgraph
        return False
    bound = getattr(target, "__self__", None)
    if bound is not None and not isinstance(bound, types.ModuleType):
        return False  # a bound method: its object's state is not in the graph's code
    module = getattr(target, "__module__", None)
    if not isinstance(module, str):
        return False
    name = getattr(target, "__name__", "")
    if module in _PYTHON_MODULES:
        return getattr(operator, name, None) is target or getattr(math, name, None) is target
    return (module == "torch" or module.startswith("torch.")) and not module.startswith(_TORCH_EXCLUDED)


def _check_inputs(inputs: Sequence[Any]) -> None:
    """:class:`disk_key.Unkeyable` for a tensor subclass input (its type is
    not in the key, and its program is not stored)."""
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and type(x) not in _PLAIN_TENSORS:
            raise disk_key.Unkeyable(f"input {i} is a {type(x).__name__}")


def _switches() -> tuple[Any, ...]:
    """The process switches a decomposition may choose by (probed: a switch
    this torch does not have is left out)."""
    backends = torch.backends
    found: list[Any] = [torch.get_float32_matmul_precision(), torch.is_deterministic_algorithms_warn_only_enabled()]
    for read in (
        lambda: backends.cuda.flash_sdp_enabled(),
        lambda: backends.cuda.mem_efficient_sdp_enabled(),
        lambda: backends.cuda.math_sdp_enabled(),
        lambda: backends.cuda.cudnn_sdp_enabled(),
        lambda: backends.cuda.fp16_bf16_reduction_math_sdp_allowed(),
        lambda: (backends.cuda.matmul.allow_tf32, backends.cuda.matmul.allow_fp16_reduced_precision_reduction),
        lambda: (backends.cudnn.enabled, backends.cudnn.deterministic, backends.cudnn.allow_tf32),
        lambda: backends.mkldnn.enabled,
        lambda: (backends.opt_einsum.enabled, backends.opt_einsum.strategy),
    ):
        try:
            found.append(read())
        except (AttributeError, RuntimeError, TypeError):  # not in this torch
            found.append(None)
    return tuple(found)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
