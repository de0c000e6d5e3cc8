"""What the Hugging Face model tests share: configs without dropout, the
tolerances, and a few training steps compared with an eager copy."""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOL = {"atol": 2e-5, "rtol": 2e-4}


def _random_in_training(name: str) -> bool:
    """Whether a config attribute named ``name`` is a probability of something
    drawn at random in training: dropout of every kind (``*dropout*``,
    ``*_pdrop``, ``*layerdrop``, ``layer_drop``, ``fusion_droppath``),
    stochastic depth (``drop_path_rate``, ``drop_connect_rate``,
    ``attn_drop_rate``), SpecAugment's masks (``mask_time_prob``) and a MoE
    router's jitter (``router_jitter_noise``)."""
    parts = name.split("_")
    return (
        any("drop" in part for part in parts)
        or (parts[0] == "mask" and parts[-1] == "prob")
        or name.endswith("jitter_noise")
    )


def no_dropout(config: Any) -> Any:
    """``config`` with every probability of something drawn at random in
    training 0 (:func:`_random_in_training`; a list or tuple of them, one a
    stage, too), in its sub-configs as well: compiled and eager draw
    differently. Stochastic depth defaults to 0.1 in Swin, BEiT, Segformer."""
    for name, value in list(vars(config).items()):
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):  # a sub-config (text_config, ...)
            no_dropout(value)
        elif not _random_in_training(name):
            continue
        elif isinstance(value, float):
            setattr(config, name, 0.0)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, float) for v in value):
            setattr(config, name, type(value)(0.0 for _ in value))
    return config


def train_like_eager(
    model: torch.nn.Module,
    compile: Callable[[torch.nn.Module], Any],
    inputs: Callable[[int], dict[str, Any]],
    steps: int = 3,
    loss_of: Callable[[Any], torch.Tensor] = lambda out: out.loss,
) -> None:
    """``steps`` AdamW steps of ``model`` compiled and of an eager copy, on
    ``inputs(step)``: the losses, every gradient and every buffer (BatchNorm's
    running statistics) after each step are the same, and nothing runs
    eagerly in conveyor's place."""
    model.train()
    ref = copy.deepcopy(model)
    compiled = compile(model)
    params = [p for p in model.parameters() if p.requires_grad]
    ref_params = [p for p in ref.parameters() if p.requires_grad]
    opt, ref_opt = torch.optim.AdamW(params, lr=1e-3), torch.optim.AdamW(ref_params, lr=1e-3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(steps):
            kwargs = inputs(step)
            losses = []
            for m, o in ((compiled, opt), (ref, ref_opt)):
                o.zero_grad()
                loss = loss_of(m(**kwargs))
                loss.backward()
                losses.append(loss.detach())
            torch.testing.assert_close(losses[0], losses[1], **TOL)
            for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
                if q.grad is None:
                    assert p.grad is None, name
                    continue
                torch.testing.assert_close(p.grad, q.grad, **TOL, msg=lambda m, name=name, step=step: f"step {step}, {name}: {m}")
            for (name, b), c in zip(model.named_buffers(), ref.buffers(), strict=True):
                torch.testing.assert_close(b, c, **TOL, msg=lambda m, name=name, step=step: f"step {step}, buffer {name}: {m}")
            opt.step()
            ref_opt.step()
    eager = [str(w.message) for w in caught if "eagerly" in str(w.message) or "static sizes" in str(w.message)]
    assert not eager, eager
