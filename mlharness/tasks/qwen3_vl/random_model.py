"""The tiny random Qwen3-VL of ``qwen3-vl-235b-a22b-random``: a ``Qwen3VLForConditionalGeneration`` with random
weights (seeded: the same every time) and a ``Qwen3VLProcessor`` made here, so nothing is downloaded.

The shape is Qwen3-VL's where the pipeline can tell: ChatML turns (``<|im_start|>role ... <|im_end|>``), each
image as ``<|vision_start|><|image_pad|>...<|vision_end|>`` with one pad per merged 2x2 group of 16-pixel patches
(a 64x64 image is 4 tokens), multimodal rotary positions, deepstack visual features, EOS ``<|im_end|>``. The text
model and the vision tower are one layer of width 32, so a sample generates in milliseconds on a CPU. The
tokenizer is byte-level BPE (Qwen's kind: any text encodes, any ids decode) trained here on a few sentences.

Video processors need torchvision; where it is absent the processor is made and loaded without one (an image
prompt never uses it; see :func:`mlharness.predictors.transformers_chat.load_processor`), and the video
processor's config is written by hand for where it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlharness.tasks.generative import ensure_checkpoint, save_checkpoint

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
           "<|video_pad|>")
PATCH, MERGE, TEMPORAL = 16, 2, 2
TEXT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                            "mrope_interleaved": True}}
VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": PATCH,
          "spatial_merge_size": MERGE, "temporal_patch_size": TEMPORAL, "out_hidden_size": 32,
          "num_position_embeddings": 64, "deepstack_visual_indexes": [0]}
# images are resized to between 32x32 and 512x512 pixels (a multiple of 32 a side), as Qwen's min/max_pixels do
PIXELS = {"shortest_edge": 32 * 32, "longest_edge": 512 * 512}
# Qwen3-VL's template reduced to what a benchmark prompt uses: turns of text and image parts, the generation prompt
CHAT_TEMPLATE = (
    "{%- for message in messages -%}<|im_start|>{{ message.role }}\n"
    "{%- if message.content is string -%}{{ message.content }}"
    "{%- else -%}{%- for part in message.content -%}"
    "{%- if part.type == 'image' or part.type == 'image_url' -%}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part.type == 'text' -%}{{ part.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}")
CORPUS = ("Classify the product in the image. Answer with JSON: category, brand, colour, is_secondhand.",
          "What is in this picture? A red square, a blue circle and a green triangle on a white background.",
          "{\"category\": \"Home & Garden > Kitchen\", \"brand\": \"Acme\", \"is_secondhand\": false}")
RANDOM_DOC = "mlharness tiny random Qwen3-VL 2 " + json.dumps([TEXT, VISION, PIXELS, CHAT_TEMPLATE], sort_keys=True)


def build_tokenizer() -> Any:
    """A byte-level BPE tokenizer with Qwen's special tokens (EOS and pad as Qwen3-VL's), trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(SPECIAL), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   padding_side="left", model_max_length=4096, clean_up_tokenization_spaces=False)


def build_processor(tokenizer: Any) -> Any:
    """``Qwen3VLProcessor`` of the PIL image processor and ``tokenizer`` (no video processor: see the module doc)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from mlharness.predictors.transformers_chat import processor_class

    images = Qwen2VLImageProcessorPil(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=TEMPORAL, size=PIXELS)
    return processor_class("Qwen3VLProcessor")(image_processor=images, tokenizer=tokenizer,
                                                chat_template=CHAT_TEMPLATE)


def build_random_model(out: Path | str) -> Path:
    """Write the tiny random Qwen3-VL checkpoint and its processor into the folder ``out``."""
    import torch
    from transformers import GenerationConfig, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    tokenizer = build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL}
    eos, pad = ids["<|im_end|>"], ids["<|endoftext|>"]
    config = Qwen3VLConfig(
        text_config={**TEXT, "vocab_size": len(tokenizer), "eos_token_id": eos, "pad_token_id": pad},
        vision_config=VISION, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        eos_token_id=eos, pad_token_id=pad, architectures=["Qwen3VLForConditionalGeneration"])
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False)
    out = save_checkpoint(model, tokenizer, Path(out), RANDOM_DOC)
    build_processor(tokenizer).save_pretrained(str(out))  # its processor_class: Qwen3VLProcessor
    # the video processor's config, written here (making one needs torchvision), for where torchvision is
    video = {"video_processor_type": "Qwen3VLVideoProcessor", "patch_size": PATCH, "merge_size": MERGE,
             "temporal_patch_size": TEMPORAL, "size": PIXELS, "processor_class": "Qwen3VLProcessor"}
    (out / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    return out


def ensure_random_model(target: Path | str) -> Path:
    """``model.generator`` of the random manifests: the checkpoint folder at ``target``, built unless it is there."""
    return ensure_checkpoint(target, RANDOM_DOC, build_random_model, "the tiny random Qwen3-VL")
