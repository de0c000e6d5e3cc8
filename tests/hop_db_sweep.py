"""PyTorch's higher-order-op database (``torch.testing._internal.hop_db.hop_db``:
``cond``, ``while_loop``, ``map``, ``scan``, ``invoke_subgraph``, ``invoke_quant``,
``auto_functionalize``, ``flex_attention`` and its backward, ``local_map_hop``,
``register_hook``, and whatever else the installed torch lists) through conveyor.

:func:`run` checks the first sample of one entry (``name.variant``) with
``conveyor.testing.check`` through one entry point (``conveyor.compile``,
``torch.compile(backend="conveyor")``, or ``aot_eager`` for comparison), without grad
or, where the op supports autograd, with its float inputs as leaves requiring grad.
Gradients are compared whenever an input requires grad (``register_hook``'s sample
always does). Entries whose ops need CUDA (``flex_attention``'s, ``inline_asm``)
run on CPU tensors too: where eager raises, the compiled program must raise alike.

``python tests/hop_db_sweep.py [entries]`` prints the outcome of every sample.
"""

from __future__ import annotations

import sys
import warnings

import torch
from conveyor.testing import check
from conveyor.testing.opinfo import sample_call
from custom_ops_programs import compiler


def _db() -> list[object]:
    from torch.testing._internal.hop_db import hop_db

    return hop_db


def entries() -> list[tuple[str, bool]]:
    """``(name.variant, supports autograd)`` of every entry of this torch's ``hop_db``."""
    return [(f"{i.name}.{i.variant_test_name}", bool(i.supports_autograd)) for i in _db()]


def run(name: str, entry: str, grad: bool = False) -> None:
    """Check the first float32 sample of ``name`` against eager."""
    info = next(i for i in _db() if f"{i.name}.{i.variant_test_name}" == name)
    torch.manual_seed(0)
    sample = next(iter(info.sample_inputs("cpu", torch.float32, requires_grad=grad)))
    fn, tensors = sample_call(info.op, sample)
    try:
        check(fn, *tensors, compile=compiler(entry), check_grads=any(t.requires_grad for t in tensors))
    finally:
        torch._dynamo.reset()


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    for name, autograd in entries():
        for grad in (False, True) if autograd else (False,):
            for e in (sys.argv[1] if len(sys.argv) > 1 else "conveyor,dynamo,aot_eager").split(","):
                try:
                    run(name, e, grad)
                    outcome = "ok"
                except Exception as exc:  # noqa: BLE001  (a sweep reports every outcome)
                    outcome = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                print(f"{name} grad={grad} {e}: {outcome}", flush=True)
