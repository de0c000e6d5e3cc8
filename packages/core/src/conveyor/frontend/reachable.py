"""State a program reaches without taking it as an argument.

Note [State a program reaches]: a program may write to Python state it does
not take as an argument: a module's own attributes (``self.last = x`` in
``forward``), a global object or one held in a closure cell
(``CACHE.k = torch.cat([CACHE.k, x])``). During a capture such a write would
store a fake tensor where the caller can see it, and a graph cannot replay
it. So :class:`StateWatch` takes a shallow snapshot of that state before each
trace: every submodule's attributes, parameters and buffers (of the compiled
module, or of the instance a compiled bound method belongs to), and the plain
objects, lists and dicts reachable from the function's closure cells and the
globals its code names. After the trace it puts everything back and names
what changed; capture then raises
:class:`~conveyor.errors.EagerFallback`, so that specialization runs
eagerly, as eager would, with a warning. Argument objects are not watched
here: their writes are replayed (Note [Python objects in and out]).

Only the function's own code is looked at: state reached only through other
functions it calls is not watched, nor are the runtime's own objects
(loggers, locks, torch's internals), whose caches fill in as a trace runs;
but an optimizer's and an LR scheduler's attributes and per-parameter state
are watched (a training step would leave fake momentum buffers there).
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.nn.modules import module as _module

from conveyor.errors import DynamoSplits, EagerFallback
from conveyor.frontend.objects import HINT, is_object

_LIMIT = 2000  # containers walked at most (the watch is a safety net, not a deep copy)
_MISSING = object()


def _roots(fn: Callable[..., Any] | None, module: torch.nn.Module | None) -> list[tuple[str, Any]]:
    roots: list[tuple[str, Any]] = []
    if module is not None:
        roots.append((type(module).__name__, module))
    if fn is None or fn is module:
        return roots
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        roots.append((type(owner).__name__, owner))
    func = getattr(fn, "__func__", fn)
    if isinstance(func, types.FunctionType):
        names = func.__code__.co_freevars
        for name, cell in zip(names, func.__closure__ or (), strict=False):
            try:
                roots.append((name, cell.cell_contents))
            except ValueError:  # an empty cell
                pass
        for name in func.__code__.co_names:
            if name in func.__globals__:
                roots.append((name, func.__globals__[name]))
    elif is_object(fn) or callable(fn) and hasattr(fn, "__dict__") and not isinstance(fn, type):
        roots.append((type(fn).__name__, fn))
    return roots


def reached_modules(fn: Callable[..., Any]) -> tuple[torch.nn.Module, ...]:
    """The modules a function reaches directly: in its closure cells, the
    globals its code names, the object of a bound method.

    Note [Modules a function reaches]: a compiled function that calls a
    module it closes over (``conveyor.compile(lambda x: model(x))``) is traced
    with that module's training flags and forward hooks, as a compiled module
    is; so they key its compiled programs as a module's do (Note [Forward
    hooks], Note [Module state per call]): ``model.eval()`` or a hook
    registered later compiles again instead of reusing the graph traced
    before. (A module reached only through another object or function is not
    looked for.)"""
    found: dict[int, torch.nn.Module] = {}
    for _, value in _roots(fn, None):
        if isinstance(value, torch.nn.Module):
            found.setdefault(id(value), value)
    return tuple(found.values())


def _functions(fn: Callable[..., Any] | None, module: torch.nn.Module | None) -> list[types.FunctionType]:
    """The Python functions whose own global and closure bindings a program
    may rebind: ``fn`` (or its ``__func__``), a module's ``forward``, and the
    functions these reach by name (Note [Functions a program calls by name])."""
    found: list[types.FunctionType] = []
    stack = [getattr(fn, "__func__", fn), getattr(type(module), "forward", None) if module is not None else None]
    while stack and len(found) < _MAX_FUNCTIONS:
        f = stack.pop()
        if not isinstance(f, types.FunctionType) or f in found or (f.__module__ or "").split(".")[0] in _INFRASTRUCTURE:
            continue
        found.append(f)
        reached = [_cell_contents(c) for c in f.__closure__ or ()]
        reached += [f.__globals__.get(name) for name in f.__code__.co_names]
        stack += [getattr(v, "__func__", v) for v in reached if isinstance(getattr(v, "__func__", v), types.FunctionType)]
    return found


# Note [Functions a program calls by name]: a function the program reaches
# through its closure or its globals (``checkpoint(gn, x)`` with ``gn`` a
# closure doing ``nonlocal counter; counter += 1``) runs its Python once, at
# trace time; the graph keeps none of it. Its closure and global bindings are
# watched as the program's own are, so such a program runs eagerly, warned,
# instead of counting once and never again (eager counts every call, and again
# in a reentrant checkpoint's recomputation). Functions of the runtime's
# libraries (torch, functools, ...) are not followed.
_MAX_FUNCTIONS = 64


def hook_dicts(m: torch.nn.Module | None) -> tuple[dict[Any, Any], ...]:
    """The dicts holding a module's forward (pre-)hooks, or (``None``) the
    process's global ones: the one place that says where forward hooks live."""
    if m is None:
        return (_module._global_forward_pre_hooks, _module._global_forward_hooks)
    return (m._forward_pre_hooks, m._forward_hooks)


_HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
)


def _all_hook_dicts(m: torch.nn.Module) -> list[dict[Any, Any]]:
    """Every hook dict of a module (those this torch's ``Module`` has)."""
    return [d for d in (getattr(m, name, None) for name in _HOOK_DICTS) if isinstance(d, dict)]


def forward_hooks(modules: Iterable[torch.nn.Module]) -> Iterator[tuple[str, Any]]:
    """The forward (pre-)hooks that run when ``modules`` are called: the
    process's global ones, then each module's, with where they are
    registered (Note [Forward hooks])."""
    for d in hook_dicts(None):
        for hook in d.values():
            yield "a global module hook", hook
    for m in modules:
        for d in hook_dicts(m):
            for hook in d.values():
                yield f"a forward hook of {type(m).__qualname__}", hook


def _hook_parts(label: str, hook: Any) -> tuple[list[tuple[str, types.FunctionType]], list[tuple[str, Any]]]:
    """A hook's own function (its global and closure bindings) and the state
    it reaches: its closure cells, the object of a bound method or a callable
    instance, a ``functools.partial``'s arguments."""
    roots: list[tuple[str, Any]] = []
    target = hook
    if isinstance(hook, functools.partial):
        roots += [(f"{label} (its arguments)", a) for a in (*hook.args, *hook.keywords.values())]
        target = hook.func
    owner = getattr(target, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        roots.append((f"{label} ({type(owner).__name__})", owner))
    func = getattr(target, "__func__", target)
    if isinstance(func, types.FunctionType):
        name = f"{label} {func.__qualname__}"
        for cell_name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=False):
            contents = _cell_contents(cell)
            if contents is not _MISSING:
                roots.append((f"{name}: {cell_name}", contents))
        roots += [(f"{name}: {g}", func.__globals__[g]) for g in func.__code__.co_names if g in func.__globals__]
        return [(f" (in {name})", func)], roots
    if is_object(target) or hasattr(target, "__dict__") and not isinstance(target, (type, types.BuiltinFunctionType)):
        roots.append((f"{label} ({type(target).__name__})", target))
    return [], roots


def _cell_contents(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


#: libraries whose objects are the runtime's, not the program's state (a logger's
#: level cache fills in as a trace logs): not watched
_INFRASTRUCTURE = (
    "logging",
    "threading",
    "_thread",
    "weakref",
    "warnings",
    "functools",
    "typing",
    "importlib",
    "torch",
)


#: torch objects whose attributes are the program's state: a training step writes them
_TRAINING_STATE = (torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)


def _infrastructure(v: Any) -> bool:
    return type(v).__module__.split(".")[0] in _INFRASTRUCTURE


def _mirrors_parameters(v: Any, m: torch.nn.Module) -> bool:
    """A list of the module's own parameters (or weak references to them)."""
    if type(v) not in (list, tuple) or not v:
        return False
    params = {id(p) for p in m._parameters.values() if p is not None}
    return all(id(x() if isinstance(x, weakref.ref) else x) in params for x in v)


def _same(a: Any, b: Any) -> bool:
    """The same object, or a rebuilt list / tuple / weak reference of the same
    objects (``nn.LSTM`` rebuilds ``_flat_weights`` whenever a parameter is
    set, as ``functional_call`` does and undoes around every trace)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, weakref.ref):
        return a() is b()
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return False


class StateWatch:
    """A shallow snapshot of the state a program reaches (Note [State a
    program reaches]); :meth:`restore` puts it back and names what changed."""

    def __init__(
        self, fn: Callable[..., Any] | None, module: torch.nn.Module | None, exclude: Iterable[Any] = ()
    ) -> None:
        skip = {id(x) for x in exclude}
        # attributes that only mirror a module's parameters (nn.RNNBase's _flat_weights): put
        # back silently, since functional_call's swapping of the parameters rewrites them
        self.mirrors: list[tuple[torch.nn.Module, dict[str, Any]]] = []
        self.saved: list[tuple[str, Any, list[tuple[Any, dict[Any, Any] | list[Any]]]]] = []
        seen: set[int] = set()
        #: which of ``saved`` hold an optimizer's or a scheduler's state, and whether the program wrote one
        self.training: set[int] = set()
        self.wrote_training_state = False
        self.globals: list[tuple[dict[str, Any], str, str, Any]] = []
        self.cells: list[tuple[types.CellType, str, Any]] = []
        roots = _roots(fn, module)
        functions = [("", f) for f in _functions(fn, module)]
        # Note [Forward hooks]: the hooks of every module the program reaches are its code too
        modules = {id(m): m for _, r in roots if isinstance(r, torch.nn.Module) for m in r.modules()}
        for label, hook in forward_hooks(modules.values()):
            hook_functions, hook_roots = _hook_parts(label, hook)
            functions += [f for f in hook_functions if f[1] not in [g for _, g in functions]]
            roots += hook_roots
        for where, func in functions:
            for name in func.__code__.co_names:  # a global the code may rebind (global n; n += 1)
                self.globals.append(
                    (func.__globals__, f"global {name}{where}", name, func.__globals__.get(name, _MISSING))
                )
            for name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=False):
                self.cells.append((cell, f"closure variable {name}{where}", _cell_contents(cell)))  # nonlocal n; n += 1
        for label, root in roots:
            if isinstance(root, torch.nn.Module):
                for name, m in root.named_modules():
                    if id(m) not in seen:
                        seen.add(id(m))
                        where = f"{label}.{name}" if name else label
                        mirrors = {k: v for k, v in vars(m).items() if _mirrors_parameters(v, m)}
                        if mirrors:
                            self.mirrors.append((m, mirrors))
                        self.saved.append(
                            (
                                where,
                                m,
                                [
                                    (vars(m), dict(vars(m))),
                                    (m._parameters, dict(m._parameters)),
                                    (m._buffers, dict(m._buffers)),
                                    # hooks the program registers (transformers' output capturing
                                    # installs its own on a first call): put back, and named
                                    *((d, dict(d)) for d in _all_hook_dicts(m)),
                                ],
                            )
                        )
                continue
            self._walk(label, root, seen, skip)

    def _walk(self, label: str, root: Any, seen: set[int], skip: set[int]) -> None:
        stack = [(label, root)]
        while stack and len(seen) < _LIMIT:
            where, v = stack.pop()
            if id(v) in seen or id(v) in skip:
                continue
            if type(v) is list:
                seen.add(id(v))
                self.saved.append((where, v, [(v, list(v))]))
                stack += [(f"{where}[{i}]", x) for i, x in enumerate(v)]
            elif isinstance(v, _TRAINING_STATE):
                # torch's objects are not watched, but an optimizer's or a scheduler's state is the
                # program's: a step would leave fakes in it (momentum buffers, step counts)
                seen.add(id(v))
                self.training.add(len(self.saved))
                self.saved.append((where, v, [(vars(v), dict(vars(v)))]))
                state = getattr(v, "state", None)
                if isinstance(state, dict):
                    self.training.add(len(self.saved))
                    self.saved.append((f"{where}.state", state, [(state, dict(state))]))
                    for k, per_param in state.items():
                        if type(per_param) is dict:
                            self.training.add(len(self.saved))
                            self.saved.append(
                                (f"{where}.state[{type(k).__name__}]", per_param, [(per_param, dict(per_param))])
                            )
                stack += [(f"{where}.{k}", x) for k, x in vars(v).items() if k != "state"]
            elif type(v) is dict or (is_object(v) and not isinstance(v, torch.nn.Module) and not _infrastructure(v)):
                seen.add(id(v))
                d = v if type(v) is dict else vars(v)
                self.saved.append((where, v, [(d, dict(d))]))
                stack += [(f"{where}.{k}", x) for k, x in d.items() if isinstance(k, str)]

    def restore(self) -> list[str]:
        """Put every watched container back; return where the program wrote."""
        for m, mirrors in self.mirrors:
            vars(m).update(mirrors)  # before the comparison: not a write of the program
        changed: list[str] = []
        for namespace, where, name, value in self.globals:
            if namespace.get(name, _MISSING) is not value:
                changed.append(where)
                if value is _MISSING:
                    namespace.pop(name, None)
                else:
                    namespace[name] = value
        for cell, where, value in self.cells:
            if _cell_contents(cell) is not value:
                changed.append(where)
                if value is _MISSING:
                    del cell.cell_contents
                else:
                    cell.cell_contents = value
        for index, (where, _, parts) in enumerate(self.saved):
            for now, saved in parts:
                if isinstance(now, list):
                    assert isinstance(saved, list)
                    if len(now) != len(saved) or any(a is not b for a, b in zip(now, saved, strict=True)):
                        changed.append(where)
                        now[:] = saved
                    continue
                assert isinstance(saved, dict)
                diff = [k for k in set(saved) | set(now) if not _same(saved.get(k, _MISSING), now.get(k, _MISSING))]
                if diff:
                    self.wrote_training_state |= index in self.training
                    changed += [
                        f"{where}.{k}" if isinstance(k, str) else f"{where}[{type(k).__name__}]"
                        for k in sorted(diff, key=str)
                    ]
                    now.clear()
                    now.update(saved)
        return changed

    def refuse(self, changed: list[str]) -> EagerFallback:
        """Why the program cannot be one graph: it wrote ``changed`` (after
        :meth:`restore`). A training step, which writes an optimizer's or a
        scheduler's state, is one dynamo can split (Note [Programs only
        dynamo can split] in ``conveyor.compiled``)."""
        changed = list(dict.fromkeys(changed))
        kind = DynamoSplits if self.wrote_training_state else EagerFallback
        return kind(
            f"it writes to {changed[:5]}{' ...' if len(changed) > 5 else ''}, state it does not take as an "
            f"argument, which a captured graph cannot replay (Note [State a program reaches]); {HINT}"
        )


def refuse_changed_containers(args: Any, kwargs: Any, leaves: Sequence[Any], in_spec: pytree.TreeSpec) -> None:
    """Note [Argument containers written by the program]: the lists, tuples
    and dicts of a call's arguments are rebuilt for each trace from their
    pytree spec, so a write to one (``out.append(y)``, ``d["k"] = y``,
    ``xs[0] = y``) lands in the rebuilt copy, never in the caller's
    container. Such a program raises :class:`EagerFallback`: it runs eagerly,
    with a warning."""
    now, spec = pytree.tree_flatten((args, kwargs))
    if spec != in_spec or len(now) != len(leaves) or any(a is not b for a, b in zip(now, leaves, strict=True)):
        raise EagerFallback(
            "it writes to a list, tuple or dict it takes as an argument, which a captured graph cannot "
            f"replay (Note [Argument containers written by the program]); {HINT}"
        )
