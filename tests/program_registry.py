"""The registry the transcribed-program catalogues fill (``PROGRAMS``) and the
helpers they register with; :mod:`torchinductor_programs` runs them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Make = Callable[[], list[Any]]
#: name -> (program, a function making its inputs)
PROGRAMS: dict[str, tuple[Callable[..., Any], Make]] = {}


def program(name: str, make: Make) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        assert name not in PROGRAMS, name
        PROGRAMS[name] = (fn, make)
        return fn

    return register


def randn(*shapes: tuple[int, ...]) -> Make:
    return lambda: [torch.randn(*s) for s in shapes]


def args(*values: Callable[[], Any]) -> Make:
    return lambda: [v() for v in values]


def lam(name: str, make: Make, fn: Callable[..., Any]) -> None:
    program(name, make)(fn)
