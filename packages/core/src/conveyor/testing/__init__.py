"""Testing helpers shared by every stage: the eager-vs-compiled checker and
pytest fixtures (installed as the ``conveyor`` pytest plugin)."""

from conveyor.testing.checker import Checked, check, clone_inputs, grad_leaves

__all__ = ["Checked", "check", "clone_inputs", "grad_leaves"]
