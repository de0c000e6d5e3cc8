"""A 32-token greedy decode of a small causal LM (transformers' Llama from a
small config, random weights, sdpa attention, a ``DynamicCache``), run in one
process four ways:

* ``eager``: the model as is;
* ``torch.compile aot_eager``: dynamo + AOTAutograd, graphs run with aten;
* ``torch.compile conveyor``: dynamo + conveyor (eager backend);
* ``conveyor.compile``: conveyor's standalone capture, ``dynamic`` left at its
  default (the first call static, then symbolic where sizes changed: core
  Note [Automatic dynamic shapes]).

The decode is a prefill of a 16-token prompt, then 32 steps of one token each,
passing the cache back in. For each way it prints: how many graphs were
compiled, the wall time of the first decode (compiles included), the wall time
of a second decode on a fresh cache (no compiles expected), and each as a
ratio to eager's; and it checks every way produced eager's tokens.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/decode.py`` (CPU, about a minute).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import conveyor  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from conveyor.dynamo import conveyor_backend  # noqa: E402
from torch._dynamo.backends.registry import lookup_backend  # noqa: E402

TOKENS = 32
PROMPT = 16


def build() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, attention_dropout=0.0,
    )
    config._attn_implementation = "sdpa"
    return transformers.LlamaForCausalLM(config).eval()


def decode(forward: Callable[..., Any], prompt: torch.Tensor) -> torch.Tensor:
    """Greedy: prefill, then one token per step with the cache passed back."""
    with torch.no_grad():
        out = forward(input_ids=prompt)
        cache, tokens = out.past_key_values, [out.logits[:, -1:].argmax(-1)]
        for _ in range(TOKENS - 1):
            out = forward(input_ids=tokens[-1], past_key_values=cache)
            tokens.append(out.logits[:, -1:].argmax(-1))
    return torch.cat(tokens, dim=1)


class Counting:
    """A dynamo backend that counts the graphs it is given."""

    def __init__(self, backend: Callable[..., Any]) -> None:
        self.backend, self.graphs = backend, 0

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        self.graphs += 1
        return self.backend(gm, example_inputs)


def main() -> None:
    model = build()
    prompt = torch.randint(0, 256, (1, PROMPT))
    rows: list[tuple[str, int, float, float, bool]] = []

    def measure(name: str, forward: Callable[..., Any], compiles: Callable[[], int]) -> None:
        t0 = time.perf_counter()
        first = decode(forward, prompt)
        t1 = time.perf_counter()
        again = decode(forward, prompt)
        t2 = time.perf_counter()
        same = bool(torch.equal(first, reference) and torch.equal(again, reference))
        rows.append((name, compiles(), t1 - t0, t2 - t1, same))

    reference = decode(model, prompt)
    measure("eager", model, lambda: 0)
    for label, backend in (("torch.compile aot_eager", lookup_backend("aot_eager")), ("torch.compile conveyor", conveyor_backend)):
        torch._dynamo.reset()
        counting = Counting(backend)
        measure(label, torch.compile(model, backend=counting), lambda counting=counting: counting.graphs)
    compiled = conveyor.compile(model)
    measure("conveyor.compile", compiled, lambda: compiled.compiles)

    eager_first, eager_again = rows[0][2], rows[0][3]
    print(f"{TOKENS}-token greedy decode, Llama 2x64 from config, prompt {PROMPT}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"{'way':<26}{'compiles':>9}{'1st decode s':>14}{'x eager':>9}{'2nd decode s':>14}{'x eager':>9}  tokens")
    for name, n, first, again, same in rows:
        print(
            f"{name:<26}{n:>9}{first:>14.3f}{first / eager_first:>9.1f}{again:>14.3f}{again / eager_again:>9.2f}  "
            f"{'= eager' if same else 'DIFFER'}"
        )


if __name__ == "__main__":
    main()
