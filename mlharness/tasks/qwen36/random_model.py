"""The tiny random model of ``qwen3.6-27b-random``: a ``Qwen3_5ForCausalLM`` (Qwen3.6-27B's architecture: the
Qwen3.5 text model, three Gated DeltaNet linear-attention layers to one full-attention layer) with random weights
(seeded: the same every time) and a tokenizer made here, so nothing is downloaded.

The shape is Qwen's where the session path can tell: ChatML turns (``<|im_start|>role ... <|im_end|>``), EOS
``<|im_end|>``, and a chat template in Qwen3's tool format: the tools as JSON lines inside ``<tools></tools>`` in
the system turn, an assistant's calls as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, tool
results as ``<tool_response>`` blocks in a user turn, reasoning off unless ``enable_thinking`` (then ``<think>``).
So ``apply_chat_template(messages, tools=...)`` renders a BFCL prompt or an agentic history as the real checkpoint's
template would, and its answers (noise) go through the same tool-call parser. Two layers of width 32: a turn
generates in milliseconds on a CPU. The tokenizer is byte-level BPE (any text encodes, any ids decode) trained on a
few sentences, with ``<tool_call>``, ``<think>`` and their closing tags as added tokens, as Qwen's are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlharness.tasks.generative import ensure_checkpoint, save_checkpoint

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
ADDED = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
CONFIG = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
          "layer_types": ["linear_attention", "full_attention"], "num_attention_heads": 2, "num_key_value_heads": 1,
          "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 2, "linear_key_head_dim": 16,
          "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "max_position_embeddings": 32768,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}}

# Qwen3's chat template in its tool format (what Qwen3 and Hermes-style tool parsers read and write), written for
# the session path: a message's content may be absent (an assistant message of tool calls only) or a list of text
# parts; tool-call arguments are a JSON object or the JSON text the model wrote; as Qwen3's, the generation prompt
# closes an empty <think> block when enable_thinking is false (reasoning off) and opens none otherwise.
CHAT_TEMPLATE = (
    "{%- macro text(content) -%}{%- if content is string -%}{{ content }}{%- elif content is not none -%}"
    "{%- for part in content -%}{%- if part.type == 'text' -%}{{ part.text }}{%- endif -%}{%- endfor -%}"
    "{%- endif -%}{%- endmacro -%}"
    "{%- if tools -%}{{- '<|im_start|>system\\n' -}}"
    "{%- if messages[0].role == 'system' -%}{{- text(messages[0].content) + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' -}}"
    "{%- elif messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' + text(messages[0].content) + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + text(message.content) + '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'assistant' -%}{%- set content = text(message.content) -%}"
    "{{- '<|im_start|>assistant\\n' + content -}}"
    "{%- for call in message.tool_calls or [] -%}"
    "{%- set call = call.function if call.function is defined else call -%}"
    "{%- if content or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + call.name + '\", \"arguments\": ' -}}"
    "{%- if call.arguments is string -%}{{- call.arguments -}}{%- else -%}{{- call.arguments | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}{%- endfor -%}{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + text(message.content) + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}")
CORPUS = ("You are a software engineer. Run the tests, read the failing file and fix the bug.",
          '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la /testbed && cat setup.py"}}\n</tool_call>',
          "What is the weather in Berkeley, CA in fahrenheit? Find the area of a triangle with base 10 and height 5.",
          '{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", '
          '"properties": {"location": {"type": "string"}}, "required": ["location"]}}}')
RANDOM_DOC = "mlharness tiny random Qwen3.6 1 " + json.dumps([CONFIG, CHAT_TEMPLATE, ADDED], sort_keys=True)


def build_tokenizer() -> Any:
    """A byte-level BPE tokenizer with Qwen's special tokens (EOS ``<|im_end|>``, pad ``<|endoftext|>``), its
    tool-call tags as added tokens and the chat template above, trained here."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=list(SPECIAL), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   padding_side="left", model_max_length=32768, clean_up_tokenization_spaces=False,
                                   chat_template=CHAT_TEMPLATE)


def build_random_model(out: Path | str) -> Path:
    """Write the tiny random Qwen3.6 checkpoint (config, weights, tokenizer with its chat template) into ``out``."""
    import torch
    from transformers import GenerationConfig, Qwen3_5ForCausalLM, Qwen3_5TextConfig

    tokenizer = build_tokenizer()
    eos, pad = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen3_5TextConfig(**CONFIG, vocab_size=len(tokenizer), eos_token_id=eos, pad_token_id=pad,
                               bos_token_id=None, tie_word_embeddings=True, architectures=["Qwen3_5ForCausalLM"])
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(config).eval()
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False)
    return save_checkpoint(model, tokenizer, Path(out), RANDOM_DOC)


def ensure_random_model(target: Path | str) -> Path:
    """``model.generator`` of ``qwen3.6-27b-random``: the checkpoint folder at ``target``, built unless it is
    there."""
    return ensure_checkpoint(target, RANDOM_DOC, build_random_model, "the tiny random Qwen3.6")
