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

import collections
import copy
from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
import torch.nn.functional as F
from conveyor.errors import CaptureError
from conveyor.testing import check
from torch import nn
from torch.utils.checkpoint import checkpoint

TOL = {"atol": 1e-5, "rtol": 1e-4}
TRITON_TOL = {"atol": 1e-4, "rtol": 1e-4}


def conveyor_eager(m: Any) -> Any:
    return conveyor.compile(m)


def conveyor_triton(m: Any) -> Any:
    return conveyor.compile(m, backend="triton")


def dynamo_eager(m: Any) -> Any:
    return torch.compile(m, backend="conveyor")


def dynamo_triton(m: Any) -> Any:
    return torch.compile(m, backend="conveyor", options={"backend": "triton"})


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)


# -- modules ------------------------------------------------------------------


class Residual(nn.Module):
    """A ResNet basic block."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
        self.c2, self.b2 = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))


class RunningBuffer(nn.Module):
    """Buffers written in forward and read after the write."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("running", torch.zeros(4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        self.running.copy_(0.5 * self.running + 0.5 * y.detach().mean(0))
        self.steps.add_(1)
        return y - self.running


class Tied(nn.Module):
    """Input embedding and output projection share one parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.out = nn.Linear(6, 10, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.emb(idx)))


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.relu(self.lin(x)))


class Frozen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)
        self.a.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class KwargsDict(nn.Module):
    """Keyword inputs (a tensor and a float), a dict of a tensor and a tuple out."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, *, y: torch.Tensor | None = None, scale: float = 1.0) -> dict[str, Any]:
        out = self.a(x) * scale
        if y is not None:
            out = out + self.b(y)
        return {"out": out, "aux": (out.sum(), x.mean(0))}


Out = collections.namedtuple("Out", "best hidden")


class NamedTupleOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> Out:
        h = self.lin(x)
        return Out(h.max(1), [h, h.sum()])


class Views(nn.Module):
    """Outputs that are the same tensor twice, a parameter, a view of a
    parameter, a buffer and views of the input."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("b", torch.arange(3.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.lin(x)
        return y, y, self.lin.weight, self.lin.weight.t(), self.b, x[0], x.view(-1)


class Losses(nn.Module):
    def forward(self, x: torch.Tensor, t: torch.Tensor, soft: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            nn.CrossEntropyLoss(label_smoothing=0.1)(x, t),
            nn.NLLLoss(ignore_index=1)(F.log_softmax(x, -1), t),
            nn.BCEWithLogitsLoss(pos_weight=torch.full((5,), 2.0))(x, soft),
            nn.HuberLoss(delta=0.5)(x, soft),
            nn.KLDivLoss(reduction="batchmean")(F.log_softmax(x, -1), F.softmax(soft, -1)),
            nn.SmoothL1Loss()(x, soft),
        )


class WritesInput(nn.Module):
    """Writes a constant into a slice of one input and scales another in place."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x[:, 0] = 0
        y.mul_(2)
        return self.lin(x) + y


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.body, x, use_reentrant=False) + x


class CausalAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 4).unbind(2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return out.transpose(1, 2).flatten(2)


class BagWithWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 3, mode="sum", padding_idx=0)

    def forward(self, idx: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return self.bag(idx, offsets, per_sample_weights=weights)


def wide(*shape: int) -> torch.Tensor:
    """Values from -25 to 25: both sides of every activation's thresholds."""
    n = 1
    for s in shape:
        n *= s
    return torch.linspace(-25, 25, n).view(shape)


Case = Callable[[], tuple[nn.Module, tuple[Any, ...], dict[str, Any]]]


def case(module: Callable[[], nn.Module], *args: Any, **kwargs: Any) -> Case:
    return lambda: (module(), args, kwargs)


ZOO: dict[str, Case] = {
    # convolutions
    "conv1d_bias": case(lambda: nn.Conv1d(3, 4, 3, padding=1), torch.randn(2, 3, 7)),
    "conv2d_stride_bias": case(lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), torch.randn(2, 3, 6, 6)),
    "conv2d_reflect_same": case(
        lambda: nn.Conv2d(2, 3, 3, padding="same", padding_mode="reflect"), torch.randn(1, 2, 5, 5)
    ),
    "conv_transpose2d_bias": case(
        lambda: nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1), torch.randn(2, 3, 4, 4)
    ),
    "conv_transpose2d_groups_dilation": case(
        lambda: nn.ConvTranspose2d(4, 4, 3, groups=2, dilation=2), torch.randn(1, 4, 3, 3)
    ),
    "conv_bn_silu_channels_last": case(
        lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.SiLU()),
        torch.randn(2, 3, 5, 5).to(memory_format=torch.channels_last),
    ),
    "conv3d_maxpool3d_ceil": case(
        lambda: nn.Sequential(nn.Conv3d(2, 3, 2), nn.MaxPool3d(2, ceil_mode=True)), torch.randn(1, 2, 4, 5, 5)
    ),
    "pixel_shuffle": case(lambda: nn.Sequential(nn.Conv2d(2, 8, 1), nn.PixelShuffle(2)), torch.randn(1, 2, 3, 3)),
    "residual_block": case(Residual, torch.randn(2, 4, 5, 5)),
    # normalizations
    "batchnorm1d_train": case(lambda: nn.BatchNorm1d(5).train(), torch.randn(4, 5)),
    "batchnorm1d_eval": case(lambda: nn.BatchNorm1d(5).eval(), torch.randn(4, 5)),
    "batchnorm1d_3d_input_train": case(lambda: nn.BatchNorm1d(3), torch.randn(4, 3, 2)),
    "batchnorm2d_no_running_stats": case(lambda: nn.BatchNorm2d(3, track_running_stats=False), torch.randn(2, 3, 4, 4)),
    "batchnorm2d_no_affine_eval": case(lambda: nn.BatchNorm2d(3, affine=False).eval(), torch.randn(2, 3, 4, 4)),
    "groupnorm": case(lambda: nn.GroupNorm(2, 4), torch.randn(2, 4, 3, 3)),
    "instancenorm2d_affine": case(lambda: nn.InstanceNorm2d(3, affine=True), torch.randn(2, 3, 4, 4)),
    "instancenorm2d_running_stats": case(
        lambda: nn.InstanceNorm2d(3, track_running_stats=True), torch.randn(2, 3, 4, 4)
    ),
    "layernorm_no_affine": case(lambda: nn.LayerNorm(6, elementwise_affine=False), torch.randn(3, 6)),
    "layernorm_2d_shape": case(lambda: nn.LayerNorm([3, 4]), torch.randn(2, 3, 4)),
    "rmsnorm": case(lambda: nn.RMSNorm(6), torch.randn(3, 6)),
    "spectral_norm_linear": case(lambda: nn.utils.parametrizations.spectral_norm(nn.Linear(4, 3)), torch.randn(2, 4)),
    "weight_norm_linear": case(lambda: nn.utils.parametrizations.weight_norm(nn.Linear(4, 3)), torch.randn(2, 4)),
    # embeddings
    "embedding_padding_idx": case(lambda: nn.Embedding(10, 4, padding_idx=0), torch.tensor([[0, 2, 3], [4, 0, 9]])),
    "embedding_max_norm": case(lambda: nn.Embedding(10, 4, max_norm=1.0), torch.tensor([[1, 2, 1], [3, 4, 9]])),
    "embedding_bag_mean_offsets": case(
        lambda: nn.EmbeddingBag(10, 4, mode="mean"), torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 2])
    ),
    "embedding_bag_per_sample_weights": case(
        BagWithWeights, torch.tensor([1, 0, 4, 5, 4, 3]), torch.tensor([0, 2, 2]), torch.rand(6, requires_grad=True)
    ),
    "tied_embedding_projection": case(Tied, torch.randint(0, 10, (2, 3))),
    # recurrent
    "lstm_batch_first": case(lambda: nn.LSTM(4, 5, batch_first=True), torch.randn(2, 3, 4)),
    "lstm_2layer_bidirectional": case(
        lambda: nn.LSTM(4, 5, num_layers=2, bidirectional=True, batch_first=True), torch.randn(2, 3, 4)
    ),
    "gru_2layer_batch_first": case(lambda: nn.GRU(4, 5, num_layers=2, batch_first=True), torch.randn(2, 3, 4)),
    "rnn_relu_with_hx": case(
        lambda: nn.RNN(4, 5, num_layers=2, nonlinearity="relu"), torch.randn(3, 2, 4), torch.randn(2, 2, 5)
    ),
    # attention
    "mha_need_weights": case(
        lambda: nn.MultiheadAttention(8, 2, batch_first=True),
        torch.randn(2, 3, 8),
        torch.randn(2, 4, 8),
        torch.randn(2, 4, 8),
    ),
    "mha_no_weights_key_padding_mask": case(
        lambda: nn.MultiheadAttention(8, 2, batch_first=True),
        torch.randn(2, 3, 8),
        torch.randn(2, 4, 8),
        torch.randn(2, 4, 8),
        need_weights=False,
        key_padding_mask=torch.tensor([[False, False, True, False], [False, False, False, False]]),
    ),
    "mha_per_head_weights_attn_mask": case(
        lambda: nn.MultiheadAttention(8, 2),
        torch.randn(3, 2, 8),
        torch.randn(4, 2, 8),
        torch.randn(4, 2, 8),
        average_attn_weights=False,
        attn_mask=torch.triu(torch.ones(3, 4, dtype=torch.bool), 1),
    ),
    "mha_kdim_vdim_bias_kv": case(
        lambda: nn.MultiheadAttention(8, 2, kdim=6, vdim=5, batch_first=True, add_bias_kv=True),
        torch.randn(2, 3, 8),
        torch.randn(2, 4, 6),
        torch.randn(2, 4, 5),
    ),
    "sdpa_causal": case(CausalAttention, torch.randn(2, 5, 8)),
    "transformer_decoder_layer": case(
        lambda: nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
        torch.randn(2, 3, 8),
        torch.randn(2, 4, 8),
    ),
    "transformer_decoder_norm_first_causal": case(
        lambda: nn.TransformerDecoder(
            nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=True, activation="gelu"), 1
        ),
        torch.randn(3, 2, 8),
        torch.randn(4, 2, 8),
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(3),
        tgt_is_causal=True,
    ),
    "transformer_encoder_padding_mask": case(
        lambda: nn.TransformerEncoder(
            nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 1, enable_nested_tensor=False
        ),
        torch.randn(2, 4, 8),
        src_key_padding_mask=torch.tensor([[False, False, True, True], [False, False, False, False]]),
    ),
    # resampling and pooling
    "upsample_nearest": case(lambda: nn.Upsample(scale_factor=2, mode="nearest"), torch.randn(1, 2, 3, 3)),
    "upsample_bilinear": case(lambda: nn.Upsample(scale_factor=2, mode="bilinear"), torch.randn(1, 2, 3, 3)),
    "upsample_bicubic_align_corners": case(
        lambda: nn.Upsample(size=(5, 7), mode="bicubic", align_corners=True), torch.randn(1, 2, 3, 4)
    ),
    "maxpool2d": case(lambda: nn.MaxPool2d(2), torch.randn(1, 2, 4, 4)),
    "maxpool2d_dilation": case(lambda: nn.MaxPool2d(2, stride=1, dilation=2), torch.randn(1, 2, 6, 6)),
    "maxpool2d_return_indices": case(lambda: nn.MaxPool2d(2, return_indices=True), torch.randn(1, 2, 4, 4)),
    "avgpool2d_padding": case(lambda: nn.AvgPool2d(3, stride=2, padding=1), torch.randn(1, 2, 5, 5)),
    "avgpool1d_ceil_no_pad_count": case(
        lambda: nn.AvgPool1d(3, 2, padding=1, ceil_mode=True, count_include_pad=False), torch.randn(2, 3, 8)
    ),
    "adaptive_avgpool2d_non_divisible": case(lambda: nn.AdaptiveAvgPool2d((3, 2)), torch.randn(1, 2, 7, 5)),
    "adaptive_maxpool1d": case(lambda: nn.AdaptiveMaxPool1d(3), torch.randn(2, 3, 7)),
    "fold_unfold": case(lambda: nn.Sequential(nn.Unfold(2), nn.Fold((4, 4), 2)), torch.randn(1, 2, 4, 4)),
    # dropout in eval, activations, in-place activations
    "dropouts_eval": case(
        lambda: nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.AlphaDropout(0.2), nn.Dropout1d(0.3)).eval(),
        torch.randn(2, 3, 4),
    ),
    "inplace_activations": case(
        lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 4), nn.LeakyReLU(0.2, inplace=True)),
        torch.randn(3, 4),
    ),
    "relu_inplace_on_input": case(lambda: nn.ReLU(inplace=True), torch.randn(3, 4)),
    "prelu_per_channel": case(lambda: nn.PReLU(3, init=0.1), torch.randn(2, 3, 4, 4)),
    "glu": case(lambda: nn.GLU(1), torch.randn(2, 4, 3)),
    # aliasing, structure, state
    "identity_flatten_views": case(Views, torch.randn(2, 3)),
    "kwargs_dict_out": case(KwargsDict, torch.randn(2, 4), y=torch.randn(2, 4), scale=2.0),
    "namedtuple_out": case(NamedTupleOut, torch.randn(2, 4)),
    "buffer_written_then_read": case(RunningBuffer, torch.randn(3, 4)),
    "shared_submodule": case(Shared, torch.randn(3, 4)),
    "frozen_submodule": case(Frozen, torch.randn(3, 4)),
    "input_slice_assigned_a_constant": case(WritesInput, torch.randn(2, 3), torch.randn(2, 3)),
    "losses": case(Losses, torch.randn(4, 5, requires_grad=True), torch.tensor([0, 1, 4, 1]), torch.rand(4, 5)),
    "checkpoint_non_reentrant": case(Checkpointed, torch.randn(3, 4)),
}

ACTIVATIONS = {
    "silu": nn.SiLU,
    "mish": nn.Mish,
    "hardswish": nn.Hardswish,
    "hardsigmoid": nn.Hardsigmoid,
    "elu": lambda: nn.ELU(alpha=0.7),
    "selu": nn.SELU,
    "celu": lambda: nn.CELU(0.5),
    "leaky_relu": lambda: nn.LeakyReLU(0.1),
    "prelu": nn.PReLU,
    "softplus_beta_threshold": lambda: nn.Softplus(beta=2, threshold=5),
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "gelu": nn.GELU,
    "log_sigmoid": nn.LogSigmoid,
    "relu6": nn.ReLU6,
    "hardtanh": lambda: nn.Hardtanh(-2, 2),
    "softshrink": lambda: nn.Softshrink(0.3),
    "threshold": lambda: nn.Threshold(0.1, 20),
    "tanhshrink": nn.Tanhshrink,
}
for _name, _make in ACTIVATIONS.items():
    ZOO[f"activation_{_name}"] = case(_make, wide(3, 41).requires_grad_())

#: the representative subset run with the triton backend (interpreted: slow)
TRITON_ZOO = [
    "conv2d_stride_bias",
    "residual_block",
    "batchnorm1d_train",
    "groupnorm",
    "layernorm_no_affine",
    "embedding_padding_idx",
    "lstm_batch_first",
    "mha_need_weights",
    "buffer_written_then_read",
    "input_slice_assigned_a_constant",
    "activation_mish",
    "activation_softplus_beta_threshold",
    "activation_gelu_tanh",
    "activation_hardswish",
]
TRITON_DYNAMO_ZOO = ["residual_block", "mha_no_weights_key_padding_mask", "activation_silu", "kwargs_dict_out"]


def run_case(name: str, compile: Callable[[Any], Any], tol: dict[str, float]) -> None:
    module, args, kwargs = ZOO[name]()
    check(module, *args, compile=compile, **tol, **kwargs)


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


# -- several calls on one compiled module ---------------------------------------

ENTRY_POINTS = [conveyor_eager, dynamo_eager]
ALL_ENTRY_POINTS = [conveyor_eager, dynamo_eager, conveyor_triton, dynamo_triton]


def entry_id(f: Any) -> str:
    return f.__name__


def assert_same_state(compiled_module: nn.Module, eager_module: nn.Module, where: str, **tol: float) -> None:
    for (name, a), (_, b) in zip(eager_module.state_dict().items(), compiled_module.state_dict().items(), strict=True):
        torch.testing.assert_close(b, a, **tol, msg=lambda m, n=name: f"{where}: {n}: {m}")


def compare_calls(
    eager: nn.Module, compile: Callable[[Any], Any], calls: list[tuple[Any, ...]], *, grads: bool = True, **tol: float
) -> None:
    """Call ``eager`` and a compiled copy on each argument tuple in turn;
    compare outputs, parameter gradients and the state after each call."""
    mirror = copy.deepcopy(eager)
    compiled = compile(mirror)
    for k, args in enumerate(calls):
        expected, got = eager(*args), compiled(*args)
        torch.testing.assert_close(got, expected, **tol, msg=lambda m, k=k: f"call {k}: {m}")
        if grads and expected.requires_grad:
            weight = torch.randn(expected.shape)
            e = torch.autograd.grad((expected * weight).sum(), list(eager.parameters()))
            c = torch.autograd.grad((got * weight).sum(), list(mirror.parameters()))
            for j, (a, b) in enumerate(zip(c, e, strict=True)):
                torch.testing.assert_close(a, b, **tol, msg=lambda m, k=k, j=j: f"call {k} gradient {j}: {m}")
        assert_same_state(mirror, eager, f"call {k}", **tol)


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_batch_size_changes_between_calls(compile) -> None:
    # under torch.compile the second size recompiles with a dynamic batch
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 2))
    compare_calls(model, compile, [(torch.randn(n, 4),) for n in (2, 3, 5)], **TRITON_TOL)


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_batch_size_changes_with_batchnorm_in_training(compile) -> None:
    # running statistics use the (dynamic) batch size: n / (n - 1)
    compare_calls(Residual(), compile, [(torch.randn(n, 4, 5, 5),) for n in (2, 3)], **TRITON_TOL)


def test_sequence_length_changes_between_calls() -> None:
    # torch.compile: a dynamic sequence length from the second call on (attention, softmax over it)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    compare_calls(layer, dynamo_eager, [(torch.randn(2, n, 8),) for n in (3, 5)], **TRITON_TOL)


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_train_eval_switches_between_calls(compile) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    mirror = copy.deepcopy(model)
    compiled = compile(mirror)
    x = torch.randn(5, 4)
    model.eval(), mirror.eval()
    torch.testing.assert_close(compiled(x), model(x), msg="after eval()")
    model[1].train(), mirror[1].train()
    torch.testing.assert_close(compiled(x), model(x), msg="one submodule back in train()")
    assert_same_state(mirror, model, "after the calls")


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_eval_under_no_grad_and_inference_mode(compile) -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
    ).eval()
    compiled = compile(copy.deepcopy(model))
    x = torch.randn(2, 3, 5, 5)
    with torch.no_grad():
        expected, got = model(x), compiled(x)
    torch.testing.assert_close(got, expected, **TRITON_TOL)
    assert not got.requires_grad
    with torch.inference_mode():
        expected, got = model(x), compiled(x)
    torch.testing.assert_close(got, expected, **TRITON_TOL)
    assert got.is_inference()
    expected, got = model(x), compiled(x)  # and with grad again
    torch.testing.assert_close(got, expected, **TRITON_TOL)
    assert got.requires_grad


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_training_module_under_inference_mode_updates_buffers(compile) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).train()
    mirror = copy.deepcopy(model)
    compiled = compile(mirror)
    x = torch.randn(5, 4)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), model(x))
    assert_same_state(mirror, model, "after the call")


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_hooks_registered_before_compiling_run(compile) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    model[0].register_forward_hook(lambda mod, inp, out: out * 3)
    model[2].register_forward_pre_hook(lambda mod, inp: (inp[0] - 1,))
    check(model, torch.randn(3, 4), compile=compile, **TOL)


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_gradients_accumulate_over_calls_with_retain_graph(compile) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    mirror = copy.deepcopy(model)
    compiled = compile(mirror)
    for _ in range(3):
        x = torch.randn(3, 4)
        e, c = model(x).pow(2).mean(), compiled(x).pow(2).mean()
        e.backward(retain_graph=True), c.backward(retain_graph=True)
        e.backward(), c.backward()
    for p, q in zip(model.parameters(), mirror.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, **TOL)


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_dropout_in_training_backward_uses_the_forward_mask(compile) -> None:
    # random numbers may differ from eager's; the gradient must follow the
    # mask the forward drew (a recomputed dropout would draw another)
    class Drop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(50, 50))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            z = F.dropout(torch.relu(x) * 2, 0.5, True)
            return torch.sin(z) @ self.w, z

    compiled = compile(Drop())
    x = torch.randn(40, 50, requires_grad=True)
    y, z = compiled(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    dropped = (z == 0) & (x > 0)
    assert dropped.any() and (g[dropped] == 0).all()
    kept = (z != 0) & (x > 0)
    assert (g[kept] != 0).all()


# -- training loops ---------------------------------------------------------------


def small_cnn() -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, torch.Tensor]]]:
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 3)
    )
    return model, lambda n: (torch.randn(n, 3, 6, 6), torch.randint(0, 3, (n,)))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(12, 8)
        self.pos = nn.Parameter(torch.randn(6, 8) * 0.1)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True)
        self.head = nn.Linear(8, 12)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.emb(idx) + self.pos[: idx.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1])
        return self.head(self.layer(h, src_mask=mask, is_causal=True)).flatten(0, 1)


def tiny_lm() -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, torch.Tensor]]]:
    return TinyLM(), lambda n: (torch.randint(0, 12, (n, 5)), torch.randint(0, 12, (n * 5,)))


class LSTMClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, (h, _) = self.lstm(x)
        return self.head(h[-1] + out.mean(1))


def lstm_classifier() -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, torch.Tensor]]]:
    return LSTMClassifier(), lambda n: (torch.randn(n, 5, 4), torch.randint(0, 3, (n,)))


def train_and_compare(make, compile: Callable[[Any], Any], steps: int = 5, **tol: float) -> None:
    model, batch = make()
    mirror = copy.deepcopy(model)
    compiled = compile(mirror)
    opt_e = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_c = torch.optim.SGD(mirror.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        x, y = batch(4)
        loss_e, loss_c = F.cross_entropy(model(x), y), F.cross_entropy(compiled(x), y)
        torch.testing.assert_close(loss_c, loss_e, **tol, msg=lambda m, s=step: f"step {s} loss: {m}")
        opt_e.zero_grad(), opt_c.zero_grad()
        loss_e.backward(), loss_c.backward()
        opt_e.step(), opt_c.step()
    assert_same_state(mirror, model, f"after {steps} steps", **tol)


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
@pytest.mark.parametrize("make", [small_cnn, tiny_lm, lstm_classifier], ids=lambda f: f.__name__)
def test_training_loop_matches_eager(make, compile) -> None:
    train_and_compare(make, compile, **TRITON_TOL)


@pytest.mark.parametrize("compile", [conveyor_triton, dynamo_triton], ids=entry_id)
def test_training_loop_matches_eager_triton(compile) -> None:
    train_and_compare(small_cnn, compile, steps=3, **TRITON_TOL)


class DataDependent(nn.Module):
    """A branch on a tensor value: dynamo splits the program there."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.b = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        if y.mean() > 0.3:
            y = y * 2
        return self.b(y)


def data_dependent() -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, torch.Tensor]]]:
    step = iter(range(100))
    return DataDependent(), lambda n: (torch.randn(n, 4) + 0.3 * next(step), torch.randint(0, 3, (n,)))


def test_training_loop_across_a_graph_break() -> None:
    train_and_compare(data_dependent, dynamo_eager, **TRITON_TOL)


def test_lstm_traced_by_dynamo_with_allow_rnn() -> None:
    # with allow_rnn dynamo hands nn.LSTM to conveyor: the autograd stage's
    # forward must still produce the oneDNN workspace its backward reads
    with torch._dynamo.config.patch(allow_rnn=True):
        check(nn.LSTM(4, 5, batch_first=True), torch.randn(2, 3, 4), compile=dynamo_eager, **TOL)
    graphs = conveyor.dynamo.last_dynamo_graphs()  # conveyor compiled it (no fallback to eager)
    assert any("mkldnn_rnn_layer" in g.graph.code for g in graphs)


# -- bfloat16 ---------------------------------------------------------------------


def test_bfloat16_model_through_triton_matches_eager() -> None:
    # before the interpreter's roundings were written out, outputs and
    # gradients came out a few bfloat16 ulps off eager (3% on a bias gradient)
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 3), nn.SiLU()).to(torch.bfloat16)
    check(model, torch.randn(3, 4, dtype=torch.bfloat16), compile=conveyor_triton)


def test_autocast_under_torch_compile_triton_matches_eager() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    compiled = dynamo_triton(copy.deepcopy(model))
    x = torch.randn(3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, got = model(x), compiled(x)
    assert got.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected)


# -- documented limits and known problems ------------------------------------------


def test_batchnorm_cumulative_average_needs_torch_compile() -> None:
    # momentum=None reads num_batches_tracked as a Python float: make_fx cannot
    # capture it, and the error says to use torch.compile, which splits there
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3, momentum=None))
    with pytest.raises(CaptureError, match="torch.compile"):
        conveyor_eager(copy.deepcopy(model))(torch.randn(4, 4))
    check(model, torch.randn(4, 4), compile=dynamo_eager, **TOL)


class PlainTensorAttribute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.mask = torch.tril(torch.ones(4, 4))  # neither a parameter nor a buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.mask


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_plain_tensor_attribute(compile) -> None:
    # conveyor.compile: a tensor the program closes over becomes a graph input
    # (Note [Tensors a program closes over]); before, capture failed with
    # "Please convert all Tensors to FakeTensors first"
    check(PlainTensorAttribute(), torch.randn(4, 4), compile=compile, **TOL)


@pytest.mark.parametrize("compile", [conveyor_eager, conveyor_triton], ids=entry_id)
def test_autocast_state_is_part_of_the_conveyor_compile_cache_key(compile) -> None:
    # the program captured under autocast (with its casts to bfloat16) must not
    # be reused outside it, nor the one captured outside it under autocast
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    compiled = compile(copy.deepcopy(model))
    x = torch.randn(3, 4)
    for autocast in (True, False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            expected, got = model(x), compiled(x)
        assert got.dtype == expected.dtype, f"autocast={autocast}: {got.dtype} != eager {expected.dtype}"
        torch.testing.assert_close(got, expected, msg=lambda m, a=autocast: f"autocast={a}: {m}")


# Note [Python kernels that differ from eager] (conveyor_functionalize.decompositions):
# under the Python dispatcher torch replaces these ops with Python decompositions
# that differ from eager (torch.compile(backend="aot_eager") inherits both); the
# functional graph keeps the ops, and the triton backend keeps their eager kernels.
@pytest.mark.parametrize("compile", [conveyor_eager, conveyor_triton], ids=entry_id)
@pytest.mark.parametrize("module", [nn.Softshrink(0.3), nn.Hardshrink(0.3)], ids=["softshrink", "hardshrink"])
def test_shrink_gradient_at_nan(compile, module) -> None:
    # softshrink's decomposition gives 0 at NaN, eager's backward passes the incoming
    # gradient; hardshrink's agrees with eager (kept here as its guard)
    x = torch.tensor([0.1, 1.0, -1.0, float("nan")], requires_grad=True)
    check(module, x, compile=compile)


@pytest.mark.parametrize("compile", [*ENTRY_POINTS, conveyor_triton], ids=entry_id)
def test_multilabel_margin_loss_over_a_batch(compile) -> None:
    # the decomposition broadcasts the gathered (C, N, 1) targets against the (N, C) input
    x, target = torch.randn(2, 4, requires_grad=True), torch.tensor([[3, 0, -1, 1], [1, 2, 3, -1]])
    check(nn.MultiLabelMarginLoss(), x, target, compile=compile, **TOL)
