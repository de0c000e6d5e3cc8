"""Training steps built from PyTorch's optimizer database, to compile and
compare with eager (tests/test_optimizer_steps.py).

A case names an optimizer of ``torch.testing._internal.common_optimizers.optim_db``,
one of its ``optim_inputs_func`` configurations, an implementation (``single``,
``foreach``, ``fused``, ``differentiable``), a small model, a gradient clip and
an lr scheduler. ``Trainer`` holds the model, optimizer and scheduler of one
side; ``run_and_compare`` trains an eager trainer and a compiled one step by
step and compares, bit for bit unless told a tolerance: the returned loss,
every parameter and its gradient, every optimizer state entry (tensors with
dtype, shape and strides; ``state['step']`` included), every param_groups entry
(lr as a float or a tensor), the scheduler's state, and that no FakeTensor was
left in the user's objects.

How a trainer is compiled (``MODES``): the whole step (forward, loss,
backward, clip, ``opt.step()``, ``zero_grad``, ``sched.step()``) with
``conveyor.compile`` or ``torch.compile(backend="conveyor")``; only the model,
the optimizer eager; or only ``opt.step``.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import conveyor
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

# -- models -------------------------------------------------------------------------


class Embedder(nn.Module):
    def __init__(self, sparse: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 6, sparse=sparse)
        self.head = nn.Linear(6, 3)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(idx).mean(1))


class LSTMHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 5, batch_first=True)
        self.head = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def tiny_gpt2() -> nn.Module:
    """A Hugging Face causal LM from a small config (hf_harness.no_dropout): its loss is ``model(ids, labels=ids).loss``."""
    import transformers
    from hf_harness import no_dropout

    config = transformers.GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(no_dropout(config))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "mlp": lambda: nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)),
    "conv": lambda: nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(12, 3)),
    "lstm": LSTMHead,
    "embedding": lambda: Embedder(sparse=False),
    "sparse_embedding": lambda: Embedder(sparse=True),
    "gpt2": tiny_gpt2,
}


def batch(model: str, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    y = torch.randint(0, 3, (4,), generator=g)
    if model == "mlp":
        return torch.randn(4, 6, generator=g), y
    if model == "conv":
        return torch.randn(4, 2, 4, 4, generator=g), y
    if model == "lstm":
        return torch.randn(4, 3, 4, generator=g), y
    if model == "gpt2":
        ids = torch.randint(0, 40, (2, 6), generator=g)
        return ids, ids
    return torch.randint(0, 10, (4, 5), generator=g), y


# -- schedulers ---------------------------------------------------------------------

S = torch.optim.lr_scheduler
SCHEDULERS: dict[str, Callable[[torch.optim.Optimizer], Any]] = {
    "step": lambda o: S.StepLR(o, step_size=2, gamma=0.5),
    "multistep": lambda o: S.MultiStepLR(o, milestones=[1, 3], gamma=0.3),
    "exponential": lambda o: S.ExponentialLR(o, gamma=0.9),
    "cosine": lambda o: S.CosineAnnealingLR(o, T_max=3),
    "cosine_restarts": lambda o: S.CosineAnnealingWarmRestarts(o, T_0=2),
    "linear": lambda o: S.LinearLR(o, start_factor=0.5, total_iters=3),
    "constant": lambda o: S.ConstantLR(o, factor=0.5, total_iters=2),
    "polynomial": lambda o: S.PolynomialLR(o, total_iters=4, power=2.0),
    "lambda": lambda o: S.LambdaLR(o, lambda e: 0.9**e),
    "multiplicative": lambda o: S.MultiplicativeLR(o, lambda e: 0.95),
    "onecycle": lambda o: S.OneCycleLR(o, max_lr=0.05, total_steps=10),
    "cyclic": lambda o: S.CyclicLR(o, base_lr=0.001, max_lr=0.01, step_size_up=2),
    "sequential": lambda o: S.SequentialLR(
        o, [S.ConstantLR(o, factor=0.5, total_iters=1), S.ExponentialLR(o, gamma=0.9)], milestones=[2]
    ),
    "chained": lambda o: S.ChainedScheduler([S.ConstantLR(o, factor=0.5, total_iters=2), S.ExponentialLR(o, 0.9)]),
    "plateau": lambda o: S.ReduceLROnPlateau(o, patience=0, factor=0.5),
}


# -- cases --------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    optim: str
    desc: str
    kwargs: dict[str, Any]
    impl: str = "single"  # single, foreach, fused, differentiable
    model: str = "mlp"
    clip: str | None = "norm"  # norm, norm_foreach, value, None
    sched: str | None = None
    scaler: bool = False
    zero_first: bool = True  # zero_grad before backward (gradients visible after the step)

    @property
    def id(self) -> str:
        extra = [self.model, self.clip or "noclip", self.sched or "", "scaler" if self.scaler else ""]
        return "-".join([self.optim, self.desc.replace(" ", "_").replace(",", ""), self.impl, *filter(None, extra)])

    def with_(self, **changes: Any) -> Case:
        return dataclasses.replace(self, **changes)


def optim_infos() -> dict[str, Any]:
    from torch.testing._internal.common_optimizers import optim_db

    return {info.optim_cls.__name__: info for info in optim_db}


def db_cases(device: str = "cpu") -> list[Case]:
    """Every configuration ``optim_inputs_func`` lists, under each implementation the optimizer supports on CPU."""
    cases = []
    for name, info in optim_infos().items():
        impls = ["single"] + [i for i in info.supported_impls if i in ("foreach", "differentiable")]
        if "fused" in info.supported_impls and "cpu" in info.supports_fused_on:
            impls.append("fused")
        sparse = info.only_supports_sparse_grads
        for oi in info.optim_inputs_func(device=device):
            for impl in impls:
                cases.append(Case(name, oi.desc, dict(oi.kwargs), impl, "sparse_embedding" if sparse else "mlp",
                                  clip=None if sparse else "norm"))
    return cases


def impl_kwargs(case: Case) -> dict[str, Any]:
    kwargs = {k: (v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)) for k, v in case.kwargs.items()}
    if case.impl == "single" and case.optim not in ("LBFGS", "SparseAdam", "Muon"):
        kwargs.setdefault("foreach", False)
    elif case.impl in ("foreach", "fused", "differentiable"):
        kwargs[case.impl] = True
    return kwargs


# -- one side of the comparison -------------------------------------------------------


class Trainer:
    """One side: model, optimizer, scheduler, scaler; ``step(x, y)`` is the whole training step."""

    def __init__(self, case: Case) -> None:
        torch.manual_seed(0)
        self.case = case
        self.model = MODELS[case.model]()
        params = [p for p in self.model.parameters() if case.optim != "Muon" or p.dim() == 2]  # Muon: matrices only
        if case.optim == "SparseAdam":  # sparse gradients only: the embedding's
            params = list(self.model.emb.parameters())
        self.opt = getattr(torch.optim, case.optim)(params, **impl_kwargs(case))
        self.sched = SCHEDULERS[case.sched](self.opt) if case.sched else None
        self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8) if case.scaler else None
        self.forward: Callable[..., torch.Tensor] = self.model
        self.opt_step: Callable[..., Any] = self.opt.step

    def clip(self) -> None:
        params = list(self.model.parameters())
        if self.case.clip == "norm":
            nn.utils.clip_grad_norm_(params, 0.5, foreach=False)
        elif self.case.clip == "norm_foreach":
            nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
        elif self.case.clip == "value":
            nn.utils.clip_grad_value_(params, 0.05)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.case.model == "gpt2":
            return self.forward(input_ids=x, labels=y).loss  # type: ignore[no-any-return]
        return nn.functional.cross_entropy(self.forward(x), y)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.case.optim == "LBFGS":

            def closure() -> torch.Tensor:
                self.opt.zero_grad()
                loss = self.loss(x, y)
                loss.backward()
                return loss

            loss = self.opt_step(closure)
        else:
            if self.case.zero_first:
                self.opt.zero_grad()
            loss = self.loss(x, y)
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.unscale_(self.opt)
                self.clip()
                self.scaler.step(self.opt)
                self.scaler.update()
            else:
                loss.backward()
                self.clip()
                self.opt_step()
            if not self.case.zero_first:
                self.opt.zero_grad()
        if isinstance(self.sched, S.ReduceLROnPlateau):
            self.sched.step(loss)
        elif self.sched is not None:
            self.sched.step()
        return loss.detach()


# -- how the compiled side is compiled -------------------------------------------------


def _dynamo(backend: str | None) -> Callable[[Callable[..., Any]], Any]:
    if backend == "aot_eager":  # the reference a difference from eager is judged by
        return lambda f: torch.compile(f, backend="aot_eager")
    options = {"backend": backend} if backend else None
    return lambda f: torch.compile(f, backend="conveyor", options=options)


def _standalone(backend: str | None) -> Callable[[Callable[..., Any]], Any]:
    return lambda f: conveyor.compile(f, backend=backend) if backend else conveyor.compile(f)


def compiled_trainer(case: Case, mode: str, backend: str | None = None) -> tuple[Trainer, Callable[..., Any]]:
    """The compiled side and its step: ``mode`` is one of ``MODES``."""
    t = Trainer(case)
    entry = _standalone(backend) if mode.endswith("conveyor") and backend != "aot_eager" else _dynamo(backend)
    if mode.startswith("whole"):
        return t, entry(t.step)
    if mode.startswith("model"):
        t.forward = entry(t.model)
    else:
        t.opt_step = entry(t.opt.step)
    return t, t.step


MODES = ["whole_conveyor", "whole_dynamo", "model_conveyor", "model_dynamo", "optstep_conveyor", "optstep_dynamo"]


# -- comparison -------------------------------------------------------------------------


def _same(where: str, c: Any, e: Any, tol: dict[str, float]) -> None:
    if isinstance(e, torch.Tensor):
        assert isinstance(c, torch.Tensor), f"{where}: {type(c).__name__}, eager has a tensor"
        assert not isinstance(c, FakeTensor), f"{where}: a FakeTensor was left in the user's objects"
        assert (c.dtype, c.shape, c.device, c.layout) == (e.dtype, e.shape, e.device, e.layout), (
            f"{where}: {c.dtype} {tuple(c.shape)} {c.device} {c.layout} != eager {e.dtype} {tuple(e.shape)} {e.device} {e.layout}"
        )
        if e.layout is torch.strided and e.numel() > 1:
            assert c.stride() == e.stride(), f"{where}: strides {c.stride()} != eager {e.stride()}"
        if e.is_sparse:
            c, e = c.to_dense(), e.to_dense()
        torch.testing.assert_close(c.detach(), e.detach(), equal_nan=True, **tol, msg=lambda m: f"{where}: {m}")
    elif isinstance(e, dict):
        assert isinstance(c, dict) and c.keys() == e.keys(), f"{where}: keys {list(c)} != eager {list(e)}"
        for k in e:
            _same(f"{where}[{k!r}]", c[k], e[k], tol)
    elif isinstance(e, (list, tuple)):
        assert type(c) is type(e) and len(c) == len(e), f"{where}: {c!r} != eager {e!r}"
        for i, (a, b) in enumerate(zip(c, e)):
            _same(f"{where}[{i}]", a, b, tol)
    elif isinstance(e, float) and isinstance(c, float) and c != e and tol:
        assert abs(c - e) <= tol["atol"] + tol["rtol"] * abs(e), f"{where}: {c!r} != eager {e!r}"
    elif callable(e):
        return
    else:
        assert type(c) is type(e) and (c == e or (c != c and e != e)), f"{where}: {c!r} != eager {e!r}"


def snapshot(t: Trainer, loss: Any) -> dict[str, Any]:
    """Every tensor and number a user can read after a step (copies)."""
    params = list(t.model.parameters())
    state: dict[str, Any] = {
        "loss": loss,
        "parameters": {n: p for n, p in t.model.named_parameters()},
        "gradients": {n: p.grad for n, p in t.model.named_parameters()},
        "opt.state": [t.opt.state.get(p, {}) for p in params],
        "params with state": len(t.opt.state),
        "param_groups": [{k: v for k, v in g.items() if k != "params"} for g in t.opt.param_groups],
    }
    if t.sched is not None:
        state["scheduler"] = _sched_state(t.sched)
    if t.scaler is not None:
        state["scaler"] = t.scaler.state_dict()
    return _copied(state)


def _copied(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.detach().clone() if not isinstance(v, FakeTensor) else v
    if isinstance(v, dict):
        return {k: _copied(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_copied(x) for x in v)
    return v


def _sched_state(s: Any) -> dict[str, Any]:
    state = {k: v for k, v in s.state_dict().items() if k not in ("_schedulers", "optimizer")}
    state["last_lr"] = s.get_last_lr() if hasattr(s, "_last_lr") else None
    return state


@dataclass(frozen=True)
class Outcome:
    """What happened to one case: ``kind`` is right, warned, both_raise, refused or wrong."""

    kind: str
    detail: str = ""
    warnings: tuple[str, ...] = ()


def run_and_compare(case: Case, mode: str, steps: int = 3, backend: str | None = None,
                    tol: dict[str, float] | None = None, reference: str = "eager") -> Outcome:
    """Train eagerly and compiled for ``steps`` steps, comparing after each.

    Returns ``right`` (or ``warned``: right, with a warning that something ran
    eagerly), ``both_raise`` (eager raises too, and the compiled side raised the
    same type), ``refused`` (the compiled side raised, eager did not); raises
    AssertionError on a difference. ``reference="aot_eager"`` compares with
    ``torch.compile(backend="aot_eager")`` compiling the same pieces instead
    (where dynamo's trace of an optimizer rounds differently from eager)."""
    tol = tol if tol is not None else {"atol": 0.0, "rtol": 0.0}
    # the reference side first, to its end: two sides compiled by dynamo in turn would share
    # dynamo's cache of the same code objects (Trainer.step, Optimizer.step)
    expected: list[Any] = []
    ref, ref_step = (Trainer(case), None) if reference == "eager" else compiled_trainer(case, mode, reference)
    for i in range(steps):
        try:
            expected.append(snapshot(ref, (ref_step or ref.step)(*batch(case.model, i))))
        except Exception as exc:
            expected.append(exc)
            break
    torch._dynamo.reset()
    comp, comp_step = compiled_trainer(case, mode, backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, want in enumerate(expected):
            x, y = batch(case.model, i)
            if isinstance(want, Exception):
                try:
                    comp_step(x, y)
                except Exception as cexc:
                    assert isinstance(cexc, type(want)), f"eager raised {type(want).__name__}: {want}; compiled {type(cexc).__name__}: {cexc}"
                    return Outcome("both_raise", f"{type(want).__name__}: {want}"[:300])
                raise AssertionError(f"step {i}: eager raised {type(want).__name__}: {want}; compiled did not")
            try:
                got = snapshot(comp, comp_step(x, y))
            except Exception as cexc:
                return Outcome("refused", f"step {i}: {type(cexc).__name__}: {cexc}"[:2000])
            _same(f"step {i}", got, want, tol)
    noted = tuple(sorted({str(w.message)[:300] for w in caught if "eager" in str(w.message) or "dynamo" in str(w.message)}))
    ran_eagerly = any("eagerly" in w for w in noted)
    return Outcome("warned" if ran_eagerly else "right", "", noted)
