"""Context-manager programs for the settings PyTorch's ``test/dynamo/test_ctx_manager.py``
does not reach (registered in :data:`ctx_manager_catalogue.PROGRAMS`): inference mode,
``torch.device`` as a context and ``set_default_device``, the ``torch.cpu.amp`` /
``torch.cuda.amp`` autocast forms, ``DisableTorchFunction``, contexts the caller entered and
the program exits, contexts entered and left open, settings called and put back."""

from __future__ import annotations

import torch
from ctx_manager_catalogue import BOTH, ENTERED, LEFT_OPEN, X1, prog, randn

# -- settings the upstream file does not reach --------------------------------------------


@prog("inference_mode_inside", X1, BOTH)
def _inference_mode_inside(x):
    with torch.inference_mode():
        y = x * 2
    return y.clone(), x + 1


@prog("inference_mode_disabled_inside", X1, ("inference",))
def _inference_mode_disabled_inside(x):
    with torch.inference_mode(False):
        y = torch.ones(2) + 1
    return x * 2, y.is_inference(), y


@prog("inference_mode_output", X1)
def _inference_mode_output(x):
    with torch.inference_mode():
        y = x * 2
    return y, x + 1


@prog("inference_mode_left_open", X1)
def _inference_mode_left_open(x):
    y = x + 1
    ctx = torch.inference_mode()
    ctx.__enter__()
    LEFT_OPEN.append(ctx)
    return y, x * 2


@prog("no_grad_left_open", X1)
def _no_grad_left_open(x):
    y = x + 1
    ctx = torch.no_grad()
    ctx.__enter__()
    LEFT_OPEN.append(ctx)
    return y, x * 2


@prog("no_grad_entered_outside_exited_inside", X1, ("entered_no_grad",))
def _no_grad_exited_inside(x):
    y = x + 1
    ENTERED.pop().__exit__(None, None, None)
    return y, x * 2


@prog("autocast_entered_outside_exited_inside", randn((4, 4)), ("entered_autocast",))
def _autocast_exited_inside(x):
    y = x @ x
    ENTERED.pop().__exit__(None, None, None)
    return y, x @ x


@prog("autocast_left_open", randn((4, 4)))
def _autocast_left_open(x):
    y = x @ x
    ctx = torch.autocast("cpu", dtype=torch.bfloat16)
    ctx.__enter__()
    LEFT_OPEN.append(ctx)
    return y, x @ x


@prog("set_grad_enabled_called_and_restored", X1, BOTH)
def _set_grad_enabled_call(x):
    prev = torch.is_grad_enabled()
    torch.set_grad_enabled(not prev)
    y = x * 3
    torch.set_grad_enabled(prev)
    return y, x + 1


@prog("set_default_dtype_changed_and_restored", randn((2,)))
def _set_default_dtype_restored(x):
    torch.set_default_dtype(torch.float64)
    a = torch.ones(2)
    torch.set_default_dtype(torch.float32)
    return a, torch.ones(2) + x


@prog("device_context", randn((2,)))
def _device_context(x):
    with torch.device("cpu"):
        y = torch.ones(2) + x
    with torch.device("meta"):
        m = torch.ones(3)
    return y, m.device.type, m.shape


@prog("set_default_device_restored", randn((2,)))
def _set_default_device_restored(x):
    torch.set_default_device("meta")
    m = torch.ones(3)
    torch.set_default_device(None)
    return m.device.type, torch.ones(2) + x


@prog("set_default_device_left_changed", randn((2,)))
def _set_default_device_left(x):
    y = torch.ones(2) + x
    torch.set_default_device("meta")
    return y, torch.ones(2).device.type


@prog("cpu_amp_autocast", randn((4, 4)))
def _cpu_amp(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):  # torch.cpu.amp.autocast's replacement
        y = x @ x
    with torch.amp.autocast("cpu", enabled=False):
        z = x @ x
    return y, z


@prog("cuda_amp_autocast_on_cpu_tensors", randn((4, 4)))
def _cuda_amp(x):
    with torch.autocast("cuda", dtype=torch.float16):  # torch.cuda.amp.autocast's replacement
        y = x @ x
    return y, torch.is_autocast_enabled("cuda")


@prog("disable_torch_function", X1)
def _disable_torch_function(x):
    with torch._C.DisableTorchFunction():
        y = x * 2
        on = torch._C._is_torch_function_enabled()
    with torch._C.DisableTorchFunctionSubclass():
        z = x + 1
    return y, z, on
