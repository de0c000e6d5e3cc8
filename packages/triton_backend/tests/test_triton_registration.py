"""Registering the triton stage imports neither the backend nor triton (Note
[Registering without importing the backend] in ``conveyor_triton.stage``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import conveyor
import conveyor_triton.plugin
import pytest
import torch
from conveyor import Plugins, StageError


def test_a_pipeline_without_the_stage_does_not_import_the_backend():
    code = textwrap.dedent(
        """
        import sys, torch, conveyor, conveyor_triton, conveyor_triton.plugin as p
        plugins = conveyor.Plugins(); plugins.register(p, name="triton")
        conveyor.Pipeline(conveyor.Config(), plugins)  # the eager backend; triton registered, not chosen
        print("before", "conveyor_triton.backend" in sys.modules, "triton" in sys.modules)
        conveyor.Pipeline(conveyor.Config(backend="triton"), plugins)
        print("chosen", "conveyor_triton.backend" in sys.modules)
        print("reports", conveyor_triton.reports.__module__)
        """
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.split("\n")[:3] == [
        "before False False",
        "chosen True",
        "reports conveyor_triton.introspect",
    ], out.stdout + out.stderr


def test_a_backend_that_cannot_be_imported_fails_the_pipeline_build(fresh_plugins: Plugins, monkeypatch):
    fresh_plugins.register(conveyor_triton.plugin, name="triton")
    monkeypatch.setitem(sys.modules, "conveyor_triton.backend", None)  # import raises ImportError
    with pytest.raises(
        StageError, match="stage 'triton': cannot work here: ModuleNotFoundError: .*conveyor_triton.backend"
    ):
        conveyor.Pipeline(conveyor.Config(backend="triton"), fresh_plugins)
    conveyor.Pipeline(conveyor.Config(), fresh_plugins)  # a pipeline without the stage is built


def test_the_lazy_stage_compiles_with_the_backend(triton_only):
    compiled = triton_only()(lambda x: x.sin() * 2)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), x.sin() * 2)
    (report,) = conveyor_triton.reports(compiled)
    assert report.kernels
    assert sorted(conveyor_triton.__all__) == sorted(n for n in conveyor_triton.__all__ if hasattr(conveyor_triton, n))
