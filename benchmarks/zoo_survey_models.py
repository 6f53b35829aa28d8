"""The models of zoo_survey's core set (MODELS): small configs with random
weights of Hugging Face decoders, encoders and encoder-decoders, timm and
torchvision image models, each a `make()` giving (module, example inputs);
and the builders the wide set (zoo_survey_wide.py) shares."""
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch_zoo  # noqa: E402  (puts python/ and tests/python on the path)


def _ids(config, length=16):
    """Token ids in [3, the vocabulary's size) (ids below 3 are often the
    pad, start and end tokens)."""
    return torch.randint(3, min(1000, config.get("vocab_size", 1000)), (1, length))


# Each input kind: (the example inputs from the config, how the model is called).
INPUTS = {
    "ids": (lambda c: (_ids(c),), lambda m, x, **o: m(x, **o)),
    # An encoder-decoder: encoder ids and 8 decoder ids.
    "ids_pair": (lambda c: (_ids(c), _ids(c, 8)),
                 lambda m, x, y, **o: m(input_ids=x, decoder_input_ids=y, **o)),
    "pixels": (lambda c: (torch.randn(1, c.get("num_channels", 3), *_image_size(c)),),
               lambda m, x, **o: m(x, **o)),
    # ViTMAE's random masking, its noise passed in (so eager and grove mask alike).
    "pixels_noise": (lambda c: (torch.randn(1, 3, *_image_size(c)),
                                torch.rand(1, (c["image_size"] // c["patch_size"]) ** 2)),
                     lambda m, x, noise, **o: m(x, noise=noise, **o)),
    "samples": (lambda c: (torch.randn(1, 4000),), lambda m, x, **o: m(x, **o)),  # raw audio
    # Audio features [batch, mel bins, frames] (Whisper's encoder).
    "audio": (lambda c: (torch.randn(1, c["num_mel_bins"], 2 * c["max_source_positions"]),),
              lambda m, x, **o: m(x, **o)),
    "audio_pair": (lambda c: (torch.randn(1, c["num_mel_bins"], 2 * c["max_source_positions"]),
                              _ids(c, 8)),
                   lambda m, x, y, **o: m(input_features=x, decoder_input_ids=y, **o)),
    # A spectrogram [batch, frames, mel bins] (the Audio Spectrogram Transformer).
    "spectrogram": (lambda c: (torch.randn(1, c["max_length"], c["num_mel_bins"]),),
                    lambda m, x, **o: m(x, **o)),
}


def _image_size(config):
    size = config.get("image_size", 64)
    return tuple(size) if isinstance(size, (list, tuple)) else (size, size)


def _hf(config_name, model_name, pick="logits", inputs="ids", **config):
    """A transformers model of `config` called on INPUTS[inputs]; a model
    answering `logits` (a causal LM, an encoder-decoder) is called without its
    KV cache."""
    options = {"use_cache": False} if pick == "logits" else {}
    example, call = INPUTS[inputs]

    def make():
        import transformers

        model = getattr(transformers, model_name)(getattr(transformers, config_name)(**config))
        return (torch_zoo.Picked(model, lambda m, *xs: getattr(call(m, *xs, **options), pick)),
                example(config))
    return make


def _timm(name, size=64, **options):
    def make():
        import timm

        return (timm.create_model(name, pretrained=False, **options),
                (torch.randn(1, 3, size, size),))
    return make


def _torchvision(name, size=64, **options):
    def make():
        import torchvision

        return (getattr(torchvision.models, name)(weights=None, **options),
                (torch.randn(1, 3, size, size),))
    return make


def _segmentation(name, size=96):
    def make():
        import torchvision

        model = getattr(torchvision.models.segmentation, name)(weights=None,
                                                               weights_backbone=None)
        return (torch_zoo.Picked(model, lambda m, x: m(x)["out"]),
                (torch.randn(1, 3, size, size),))
    return make


SMALL = dict(vocab_size=1000)
DECODER = dict(SMALL, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
               num_attention_heads=4, max_position_embeddings=256)
ENCODER = dict(SMALL, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
               num_attention_heads=4)
MODELS = [
    ("hf_mistral", _hf("MistralConfig", "MistralForCausalLM", num_key_value_heads=2, **DECODER)),
    ("hf_qwen2", _hf("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2, **DECODER)),
    ("hf_gemma", _hf("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=1, head_dim=32,
                     **DECODER)),
    ("hf_phi", _hf("PhiConfig", "PhiForCausalLM", **DECODER)),
    ("hf_gpt_neox", _hf("GPTNeoXConfig", "GPTNeoXForCausalLM", rotary_pct=0.25, **DECODER)),
    ("hf_opt", _hf("OPTConfig", "OPTForCausalLM", ffn_dim=256, word_embed_proj_dim=128,
                   **{k: v for k, v in DECODER.items() if k != "intermediate_size"})),
    ("hf_falcon", _hf("FalconConfig", "FalconForCausalLM", **SMALL, hidden_size=128,
                      num_hidden_layers=2, num_attention_heads=4)),
    ("hf_bloom", _hf("BloomConfig", "BloomForCausalLM", **SMALL, hidden_size=128, n_layer=2,
                     n_head=4)),
    ("hf_t5_encoder", _hf("T5Config", "T5EncoderModel", pick="last_hidden_state", **SMALL,
                          d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4)),
    ("hf_distilbert", _hf("DistilBertConfig", "DistilBertModel", pick="last_hidden_state",
                          **SMALL, dim=128, n_layers=2, n_heads=4, hidden_dim=256)),
    ("hf_roberta", _hf("RobertaConfig", "RobertaModel", pick="last_hidden_state", **ENCODER)),
    ("hf_albert", _hf("AlbertConfig", "AlbertModel", pick="last_hidden_state",
                      embedding_size=64, **ENCODER)),
    ("hf_electra", _hf("ElectraConfig", "ElectraModel", pick="last_hidden_state",
                       embedding_size=64, **ENCODER)),
    ("hf_deberta_v2", _hf("DebertaV2Config", "DebertaV2Model", pick="last_hidden_state",
                          **ENCODER)),
    ("hf_clip_vision", _hf("CLIPVisionConfig", "CLIPVisionModel", pick="last_hidden_state",
                           inputs="pixels", hidden_size=128, intermediate_size=256,
                           num_hidden_layers=2, num_attention_heads=4, image_size=64,
                           patch_size=16)),
    ("hf_whisper_encoder", _hf("WhisperConfig", "WhisperModel", pick="last_hidden_state",
                               inputs="audio", **SMALL, d_model=128, encoder_layers=2,
                               encoder_attention_heads=4, decoder_layers=2,
                               decoder_attention_heads=4, encoder_ffn_dim=256,
                               decoder_ffn_dim=256, num_mel_bins=80,
                               max_source_positions=50, pad_token_id=0, bos_token_id=1,
                               eos_token_id=2, decoder_start_token_id=3)),
    ("hf_wav2vec2", _hf("Wav2Vec2Config", "Wav2Vec2Model", pick="last_hidden_state",
                        inputs="samples", hidden_size=128, intermediate_size=256,
                        num_hidden_layers=2, num_attention_heads=4,
                        conv_dim=(64, 64, 64), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)),
    ("hf_segformer", _hf("SegformerConfig", "SegformerModel", pick="last_hidden_state",
                         inputs="pixels", image_size=64, hidden_sizes=[16, 32, 64, 128],
                         num_attention_heads=[1, 2, 4, 8], depths=[1, 1, 1, 1])),
    ("hf_mamba", _hf("MambaConfig", "MambaModel", pick="last_hidden_state", **SMALL,
                     hidden_size=64, state_size=8, num_hidden_layers=2, expand=2,
                     conv_kernel=4)),
    ("timm_convnext_atto", _timm("convnext_atto")),
    ("timm_cspdarknet53", _timm("cspdarknet53")),
    ("timm_resnetv2_bit", _timm("resnetv2_50x1_bit")),
    ("timm_poolformer_s12", _timm("poolformer_s12")),
    ("timm_mobilevit_xxs", _timm("mobilevit_xxs")),
    ("timm_levit_128s", _timm("levit_128s", size=224)),
    ("timm_rexnet_100", _timm("rexnet_100")),
    ("timm_efficientnet_lite0", _timm("tf_efficientnet_lite0")),
    ("timm_efficientnet_b0", _timm("efficientnet_b0")),
    ("timm_mobilenetv3_small", _timm("mobilenetv3_small_100")),
    ("timm_regnetx_002", _timm("regnetx_002")),
    ("timm_ghostnet", _timm("ghostnet_100")),
    ("timm_resnet50", _timm("resnet50")),
    ("timm_densenet121", _timm("densenet121")),
    ("timm_deit_tiny", _timm("deit_tiny_patch16_224", size=224)),
    ("timm_swin_tiny", _timm("swin_tiny_patch4_window7_224", size=224)),
    ("tv_mobilenet_v2", _torchvision("mobilenet_v2")),
    ("tv_mobilenet_v3_small", _torchvision("mobilenet_v3_small")),
    ("tv_shufflenet_v2", _torchvision("shufflenet_v2_x0_5")),
    ("tv_squeezenet", _torchvision("squeezenet1_1")),
    ("tv_mnasnet", _torchvision("mnasnet0_5")),
    ("tv_googlenet", _torchvision("googlenet", size=96, aux_logits=False, init_weights=True)),
    ("tv_inception_v3", _torchvision("inception_v3", size=299, aux_logits=False,
                                     init_weights=True)),
    ("tv_efficientnet_b0", _torchvision("efficientnet_b0")),
    ("tv_regnet_y", _torchvision("regnet_y_400mf")),
    ("tv_convnext_tiny", _torchvision("convnext_tiny")),
    ("tv_swin_t", _torchvision("swin_t", size=224)),
    ("tv_lraspp_mobilenet_v3", _segmentation("lraspp_mobilenet_v3_large")),
]
# The WhisperModel wrapper above runs the encoder alone (its decoder needs ids).
_WHISPER = dict(MODELS)["hf_whisper_encoder"]


def _whisper_encoder():
    module, example = _WHISPER()
    encoder = module.model.get_encoder()
    return torch_zoo.Picked(encoder, lambda m, x: m(x).last_hidden_state), example


MODELS = [(name, _whisper_encoder if name == "hf_whisper_encoder" else make)
          for name, make in MODELS]
