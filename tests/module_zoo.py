"""The module zoo: real ``torch.nn`` modules with their inputs, by name, and
which of them run through each entry point (see ``test_module_zoo.py``)."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from conveyor.testing import check
from torch import nn
from torch.utils.checkpoint import checkpoint

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
