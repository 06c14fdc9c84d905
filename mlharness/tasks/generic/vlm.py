"""The ``tiny-vlm-random`` test model: a tiny random-weight LLaVA (``LlavaForConditionalGeneration``: a 2-layer CLIP
vision tower of width 32 on 32x32 images in 8x8 patches, a projector, a 2-layer Llama of width 64) with its
``LlavaProcessor`` (a CLIP image processor, the tiny byte-level tokenizer of the llama3.1-8b test models plus an
``<image>`` token, and a Llama-3-style chat template), saved as a checkpoint folder that
``AutoModelForImageTextToText`` and ``AutoProcessor`` load offline.

It is here to show that an image+text model plugs in by manifest alone: nothing in mlharness knows LLaVA; the
``transformers`` predictor takes the checkpoint's own processor and chat template, as it would a real
``llava-hf`` checkpoint. Its answers are noise; the oracle manifest (``tiny-vlm-oracle``) scores the same set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

IMAGE_TOKEN = "<image>"
IMAGE_SIZE = 32
PATCH_SIZE = 8
VISION_CONFIG: dict[str, Any] = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                 "num_attention_heads": 2, "image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE,
                                 "projection_dim": 32}
TEXT_CONFIG: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                               "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 2048,
                               "tie_word_embeddings": False}
RANDOM_DOC = "mlharness tiny random LLaVA " + json.dumps({"vision": VISION_CONFIG, "text": TEXT_CONFIG},
                                                           sort_keys=True)

# Llama 3's turn markers (the tokenizer adds the BOS when it encodes the text); an image part becomes the processor's <image> token (which it expands to one token per
# patch: 16), a text part its text, a plain string content itself.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def build_processor() -> Any:
    """The ``LlavaProcessor``: CLIP image processing to 32x32, the tiny tokenizer with ``<image>``, the template."""
    from transformers import LlavaProcessor

    from mlharness.tasks.cnndm.tiny_tokenizer import train_tokenizer

    try:  # the PIL image processor: the default one wants torchvision, which the CPU install lacks
        from transformers import CLIPImageProcessorPil as ImageProcessor
    except ImportError:  # older transformers
        from transformers import CLIPImageProcessor as ImageProcessor
    tokenizer = train_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    images = ImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    return LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=PATCH_SIZE,
                          vision_feature_select_strategy="default", chat_template=CHAT_TEMPLATE,
                          image_token=IMAGE_TOKEN, num_additional_image_tokens=1)


def build_random_llava(out: Path | str) -> Path:
    """Write the tiny random LLaVA checkpoint (seeded: the same weights every time) into the folder ``out``."""
    import torch
    from transformers import (
        CLIPVisionConfig,
        GenerationConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    from mlharness.tasks.cnndm.tiny_tokenizer import eos_ids
    from mlharness.tasks.generative import save_checkpoint

    processor = build_processor()
    tok = processor.tokenizer
    ids = {"eos_token_id": eos_ids(tok), "pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id}
    config = LlavaConfig(vision_config=CLIPVisionConfig(**VISION_CONFIG),
                         text_config=LlamaConfig(vocab_size=len(tok), **ids, **TEXT_CONFIG),
                         image_token_index=tok.convert_tokens_to_ids(IMAGE_TOKEN),
                         vision_feature_select_strategy="default", vision_feature_layer=-1)
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(**ids, do_sample=False)
    return save_checkpoint(model, processor, Path(out), RANDOM_DOC)


def ensure_random_llava(path: Path | str) -> Path:
    """``model.generator`` of tiny-vlm-random: the checkpoint folder at ``path``, built unless it is there."""
    from mlharness.tasks.generative import ensure_checkpoint

    return ensure_checkpoint(path, RANDOM_DOC, build_random_llava, "the tiny random LLaVA")
