"""More Hugging Face ``transformers`` architectures for tests/test_hf_more_models.py:
tiny configs (hidden 32, 2 layers, vocab 96), random weights, no dropout.

``MODELS[name] = (build, inputs, labels)``: ``build()`` makes the model,
``inputs(v)`` its keyword inputs for size variant ``v`` (0 or 1: two shapes),
``labels(kwargs)`` what training adds to them (empty: the loss is the first
output's mean square).

``hf_harness.no_dropout`` zeroes dropout and stochastic depth (``drop_path_rate``: Swin, BEiT,
Segformer default to 0.1); Reformer's LSH attention draws random rotations unless ``hash_seed`` is
set.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import transformers
from hf_harness import no_dropout

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers.logging.set_verbosity_error()

V = 96  # vocabulary
Builder = Callable[[], Any]
Inputs = Callable[[int], dict[str, Any]]
Labels = Callable[[dict[str, Any]], dict[str, Any]]


def ids(*shape: int) -> torch.Tensor:
    return torch.randint(3, V, shape)


def _make(cls: str, config: str, attn: str | None = None, **kw: Any) -> Builder:
    def build() -> Any:
        cfg = getattr(transformers, config)(**kw)
        if attn is not None:
            cfg._attn_implementation = attn
        return getattr(transformers, cls)(no_dropout(cfg))

    return build


_LM = {"vocab_size": V, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
       "max_position_embeddings": 128, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1}
_GQA = {**_LM, "num_key_value_heads": 2}
_ENC = {"vocab_size": V, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
        "max_position_embeddings": 64, "pad_token_id": 0}
_S2S = {"vocab_size": V, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 64,
        "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1, "decoder_start_token_id": 2}
_VIT = {"image_size": 16, "patch_size": 4, "num_channels": 3, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64, "num_labels": 5}
_AUDIO = {"vocab_size": 32, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
          "conv_dim": (16, 16), "conv_stride": (5, 2), "conv_kernel": (10, 3), "num_conv_pos_embeddings": 8,
          "num_conv_pos_embedding_groups": 4, "do_stable_layer_norm": True, "feat_extract_norm": "layer"}


def _tok(v: int) -> dict[str, Any]:
    return {"input_ids": ids(2, 6 + 3 * v)}


def _tok_mask(v: int) -> dict[str, Any]:
    n = 7 + 2 * v
    return {"input_ids": ids(2, n), "attention_mask": torch.ones(2, n, dtype=torch.long)}


def _s2s(v: int) -> dict[str, Any]:
    return {"input_ids": ids(2, 6 + v), "decoder_input_ids": ids(2, 4 + v), "use_cache": False}


def _img(size: int) -> Inputs:
    return lambda v: {"pixel_values": torch.randn(2 + v, 3, size, size)}


def _self_labels(kw: dict[str, Any]) -> dict[str, Any]:
    return {"labels": kw["input_ids"]}


def _s2s_labels(kw: dict[str, Any]) -> dict[str, Any]:
    return {"labels": kw["decoder_input_ids"]}


def _cls_labels(kw: dict[str, Any]) -> dict[str, Any]:
    return {"labels": torch.arange(next(iter(kw.values())).shape[0]) % 5}


def _none(kw: dict[str, Any]) -> dict[str, Any]:
    return {}


MODELS: dict[str, tuple[Builder, Inputs, Labels]] = {
    # decoder LMs
    "mistral": (_make("MistralForCausalLM", "MistralConfig", "sdpa", **_GQA), _tok, _self_labels),
    "qwen2": (_make("Qwen2ForCausalLM", "Qwen2Config", "sdpa", **_GQA), _tok, _self_labels),
    "qwen3": (_make("Qwen3ForCausalLM", "Qwen3Config", "sdpa", head_dim=8, **_GQA), _tok, _self_labels),
    "phi": (_make("PhiForCausalLM", "PhiConfig", "eager", **_LM), _tok, _self_labels),
    "phi3": (_make("Phi3ForCausalLM", "Phi3Config", "sdpa", **_GQA), _tok, _self_labels),
    "gemma": (_make("GemmaForCausalLM", "GemmaConfig", "eager", head_dim=8, **_GQA), _tok, _self_labels),
    "gemma2": (_make("Gemma2ForCausalLM", "Gemma2Config", "eager", head_dim=8, sliding_window=4, **_GQA), _tok, _self_labels),
    "gpt_neox": (_make("GPTNeoXForCausalLM", "GPTNeoXConfig", "eager", **_LM), _tok, _self_labels),
    "falcon": (_make("FalconForCausalLM", "FalconConfig", None, vocab_size=V, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, pad_token_id=0, bos_token_id=2, eos_token_id=1), _tok, _self_labels),
    "opt": (_make("OPTForCausalLM", "OPTConfig", "eager", vocab_size=V, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                  num_attention_heads=4, word_embed_proj_dim=32, max_position_embeddings=128, pad_token_id=0,
                  bos_token_id=2, eos_token_id=1), _tok, _self_labels),
    "gptj": (_make("GPTJForCausalLM", "GPTJConfig", "eager", vocab_size=V, n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
                   n_positions=128, pad_token_id=0, bos_token_id=2, eos_token_id=1), _tok, _self_labels),
    "qwen2_moe": (_make("Qwen2MoeForCausalLM", "Qwen2MoeConfig", "sdpa", num_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, shared_expert_intermediate_size=32, **_GQA), _tok, _self_labels),
    "mamba": (_make("MambaForCausalLM", "MambaConfig", None, vocab_size=V, hidden_size=32, state_size=4,
                    num_hidden_layers=2, expand=2, conv_kernel=4, pad_token_id=0, bos_token_id=2, eos_token_id=1,
                    use_mambapy=True), _tok, _self_labels),
    # encoders
    "roberta": (_make("RobertaForMaskedLM", "RobertaConfig", None, **_ENC), _tok_mask, _self_labels),
    "distilbert": (_make("DistilBertForMaskedLM", "DistilBertConfig", None, vocab_size=V, dim=32, n_layers=2, n_heads=4,
                         hidden_dim=64, max_position_embeddings=64, pad_token_id=0), _tok_mask, _self_labels),
    "albert": (_make("AlbertForMaskedLM", "AlbertConfig", None, embedding_size=16, **_ENC), _tok_mask, _self_labels),
    "electra": (_make("ElectraForMaskedLM", "ElectraConfig", None, embedding_size=16, **_ENC), _tok_mask, _self_labels),
    "deberta": (_make("DebertaForMaskedLM", "DebertaConfig", None, relative_attention=True, pos_att_type=["p2c", "c2p"],
                      max_relative_positions=16, **_ENC), _tok_mask, _self_labels),
    "deberta_v2": (_make("DebertaV2ForMaskedLM", "DebertaV2Config", None, relative_attention=True,
                         pos_att_type=["p2c", "c2p"], position_buckets=8, max_relative_positions=16, **_ENC),
                   _tok_mask, _self_labels),
    "mobilebert": (_make("MobileBertForMaskedLM", "MobileBertConfig", None, vocab_size=V, hidden_size=32,
                         embedding_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
                         intra_bottleneck_size=16, true_hidden_size=16, num_feedforward_networks=1,
                         max_position_embeddings=64, pad_token_id=0), _tok_mask, _self_labels),
    "xlm_roberta": (_make("XLMRobertaForMaskedLM", "XLMRobertaConfig", None, **_ENC), _tok_mask, _self_labels),
    # encoder-decoders
    "bart": (_make("BartForConditionalGeneration", "BartConfig", None, **_S2S), _s2s, _s2s_labels),
    "mbart": (_make("MBartForConditionalGeneration", "MBartConfig", None, **_S2S), _s2s, _s2s_labels),
    "pegasus": (_make("PegasusForConditionalGeneration", "PegasusConfig", None, **_S2S), _s2s, _s2s_labels),
    "marian": (_make("MarianMTModel", "MarianConfig", None, **_S2S), _s2s, _s2s_labels),
    "whisper": (_make("WhisperForConditionalGeneration", "WhisperConfig", None, vocab_size=V, num_mel_bins=8, d_model=32,
                      encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                      encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16, max_target_positions=32,
                      pad_token_id=0, bos_token_id=2, eos_token_id=1, decoder_start_token_id=2),
                lambda v: {"input_features": torch.randn(2 + v, 8, 32), "decoder_input_ids": ids(2 + v, 4 + v),
                           "use_cache": False}, _s2s_labels),
    # vision
    "convnext": (_make("ConvNextForImageClassification", "ConvNextConfig", None, num_channels=3, hidden_sizes=[8, 16],
                       depths=[1, 1], num_stages=2, num_labels=5), _img(32), _cls_labels),
    "swin": (_make("SwinForImageClassification", "SwinConfig", None, image_size=32, patch_size=4, embed_dim=16,
                   depths=[1, 1], num_heads=[2, 4], window_size=4, num_labels=5), _img(32), _cls_labels),
    "deit": (_make("DeiTForImageClassification", "DeiTConfig", None, **_VIT), _img(16), _cls_labels),
    "beit": (_make("BeitForImageClassification", "BeitConfig", None, use_relative_position_bias=True, **_VIT),
             _img(16), _cls_labels),
    "dinov2": (_make("Dinov2ForImageClassification", "Dinov2Config", None, **_VIT), _img(16), _cls_labels),
    "mobilevit": (_make("MobileViTForImageClassification", "MobileViTConfig", None, image_size=32, patch_size=2,
                        hidden_sizes=[16, 16, 16], neck_hidden_sizes=[8, 8, 16, 16, 16, 16, 32], num_labels=5),
                  _img(32), _cls_labels),
    "segformer": (_make("SegformerForSemanticSegmentation", "SegformerConfig", None, num_channels=3,
                        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                        num_attention_heads=[1, 2], decoder_hidden_size=32,
                        num_labels=5), _img(32), _none),
    "clip_vision": (_make("CLIPVisionModel", "CLIPVisionConfig", None, image_size=16, patch_size=4, hidden_size=32,
                          num_hidden_layers=2, num_attention_heads=4, intermediate_size=64), _img(16), _none),
    "siglip_vision": (_make("SiglipVisionModel", "SiglipVisionConfig", None, image_size=16, patch_size=4,
                            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
                      _img(16), _none),
    # audio
    "hubert": (_make("HubertForCTC", "HubertConfig", None, **_AUDIO), lambda v: {"input_values": torch.randn(2, 400 + 80 * v)},
               _none),
    "wavlm": (_make("WavLMForCTC", "WavLMConfig", None, num_buckets=32, max_bucket_distance=64, **_AUDIO),
              lambda v: {"input_values": torch.randn(2, 400 + 80 * v)}, _none),
    # unusual ops
    "funnel": (_make("FunnelForMaskedLM", "FunnelConfig", None, vocab_size=V, d_model=32, n_head=4, d_head=8,
                     d_inner=64, block_sizes=[1, 1], num_decoder_layers=1), _tok_mask, _self_labels),
    "xlnet": (_make("XLNetLMHeadModel", "XLNetConfig", None, vocab_size=V, d_model=32, n_layer=2, n_head=4, d_inner=64,
                    pad_token_id=0, bos_token_id=2, eos_token_id=1), _tok, _self_labels),
    "reformer": (_make("ReformerModelWithLMHead", "ReformerConfig", None, vocab_size=V, hidden_size=32,
                       num_attention_heads=2, attention_head_size=16, attn_layers=["local", "lsh"], axial_pos_shape=[4, 8],
                       axial_pos_embds_dim=[16, 16], feed_forward_size=64, local_attn_chunk_length=4,
                       lsh_attn_chunk_length=4, num_buckets=4, hash_seed=0, is_decoder=True, max_position_embeddings=32,
                       pad_token_id=0, eos_token_id=1), lambda v: {"input_ids": ids(2 + v, 32)}, _self_labels),
    "big_bird": (_make("BigBirdForMaskedLM", "BigBirdConfig", None, attention_type="original_full", **_ENC),
                 _tok_mask, _self_labels),
}
