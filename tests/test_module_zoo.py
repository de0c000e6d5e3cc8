"""A zoo of real ``torch.nn`` modules through both entry points
(``conveyor.compile`` and ``torch.compile(backend="conveyor")``), with the
default backend, and a representative subset with ``backend="triton"``
(Triton's interpreter on CPU: slow, so small sizes and few cases).

Everything is checked against eager by the shared checker (outputs,
aliasing, inputs and buffers after the call, gradients of inputs and
parameters), or, for what it cannot express (several calls, training loops,
grad modes), by comparing with an eager copy of the module step by step.
``tests/test_integration_models.py`` covers the basic MLP / CNN / encoder
layer / embedding / buffer-update models; they are not repeated here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from module_zoo import TRITON_DYNAMO_ZOO, TRITON_ZOO, ZOO, run_case  # noqa: E402
from zoo_harness import (  # noqa: E402
    TOL,
    TRITON_TOL,
    conveyor_eager,
    conveyor_triton,
    dynamo_eager,
    dynamo_triton,
    fresh_dynamo,  # noqa: E402,F401  (autouse)
)


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_through_conveyor_compile(name: str) -> None:
    run_case(name, conveyor_eager, TOL)


#: dynamo does not trace recurrent modules (torch._dynamo.config.allow_rnn): they run eagerly
RECURRENT = {"lstm_batch_first", "lstm_2layer_bidirectional", "gru_2layer_batch_first", "rnn_relu_with_hx"}
#: the activations the conveyor.compile run covers all of; a few are enough here
ACTIVATIONS_UNDER_DYNAMO = {
    f"activation_{a}" for a in ("silu", "mish", "hardswish", "elu", "prelu", "softplus_beta_threshold", "gelu_tanh")
}
#: variants of one aten op that dynamo hands over as it does the base case (time: dynamo is slow)
VARIANTS = {
    "conv2d_reflect_same",
    "conv_transpose2d_groups_dilation",
    "conv3d_maxpool3d_ceil",
    "maxpool2d_dilation",
    "avgpool1d_ceil_no_pad_count",
    "adaptive_maxpool1d",
    "upsample_bicubic_align_corners",
    "layernorm_2d_shape",
    "batchnorm2d_no_affine_eval",
    "fold_unfold",
    "upsample_nearest",
    "maxpool2d",
    "avgpool2d_padding",
    "glu",
    "prelu_per_channel",
    "layernorm_no_affine",
    "batchnorm1d_eval",
    "weight_norm_linear",
    "conv1d_bias",
}
DYNAMO_ZOO = [
    n
    for n in ZOO
    if n not in RECURRENT | VARIANTS and (not n.startswith("activation_") or n in ACTIVATIONS_UNDER_DYNAMO)
]


@pytest.mark.parametrize("name", DYNAMO_ZOO)
def test_zoo_through_torch_compile(name: str) -> None:
    run_case(name, dynamo_eager, TOL)


@pytest.mark.parametrize("name", TRITON_ZOO)
def test_zoo_through_conveyor_compile_triton(name: str) -> None:
    run_case(name, conveyor_triton, TRITON_TOL)


@pytest.mark.parametrize("name", TRITON_DYNAMO_ZOO)
def test_zoo_through_torch_compile_triton(name: str) -> None:
    run_case(name, dynamo_triton, TRITON_TOL)
