"""gpt-oss prompts in the Harmony chat format, built with the ``openai-harmony`` package.

A prompt is a Harmony conversation: a system message (the model identity, knowledge cutoff and reasoning effort:
``high`` for the accuracy set and TEST07, ``low`` for the performance set, as the reference's generation configs
say), a user message holding the question, then the start of the assistant's turn::

    <|start|>system<|message|>You are ChatGPT, ...\\nReasoning: high\\n\\n# Valid channels: ...<|end|>
    <|start|>user<|message|>QUESTION<|end|><|start|>assistant

``openai-harmony`` renders a conversation to token ids of its ``o200k_harmony`` encoding. That encoding needs
the ``o200k_base.tiktoken`` vocabulary, which the wheel does not bundle: it downloads it at first use (into
``TIKTOKEN_RS_CACHE_DIR``) unless ``TIKTOKEN_ENCODINGS_BASE`` names a folder holding the file (checked against
its sha256). When the vocabulary cannot be had, :func:`render_text` renders the same conversation objects with
:func:`render_plain`, which writes exactly the text the package renders for the messages used here (system with
a reasoning effort, developer instructions, user text); a test checks the two agree whenever the vocabulary is
present.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from mlharness.errors import DatasetError

log = logging.getLogger(__name__)

EFFORTS = ("low", "medium", "high")
ACCURACY_EFFORT = "high"
PERFORMANCE_EFFORT = "low"
RETURN = "<|return|>"
SPECIAL_TOKENS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", RETURN, "<|call|>")


def _harmony() -> Any:
    try:
        import openai_harmony
    except ImportError as e:
        raise DatasetError(f"gpt-oss prompts need openai-harmony (pip install 'mlharness[llm]'): {e}") from e
    return openai_harmony


def conversation(question: str, effort: str, instructions: str | None = None) -> Any:
    """The Harmony conversation of one prompt (an ``openai_harmony.Conversation``)."""
    h = _harmony()
    if effort not in EFFORTS:
        raise DatasetError(f"unknown reasoning effort '{effort}'; expected one of {', '.join(EFFORTS)}")
    system = h.SystemContent.new().with_reasoning_effort(h.ReasoningEffort(effort.capitalize()))
    messages = [h.Message.from_role_and_content(h.Role.SYSTEM, system)]
    if instructions:
        messages.append(h.Message.from_role_and_content(
            h.Role.DEVELOPER, h.DeveloperContent.new().with_instructions(instructions)))
    messages.append(h.Message.from_role_and_content(h.Role.USER, question))
    return h.Conversation.from_messages(messages)


@functools.lru_cache(maxsize=1)
def harmony_encoding() -> Any | None:
    """openai-harmony's gpt-oss encoding, or None when its vocabulary cannot be loaded (offline, no
    ``TIKTOKEN_ENCODINGS_BASE``)."""
    h = _harmony()
    try:
        return h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
    except h.HarmonyError as e:
        log.info("openai-harmony cannot load the o200k vocabulary (%s); rendering prompts without it", e)
        return None


def render_text(conv: Any) -> str:
    """The prompt text of a conversation, ending with the assistant's turn start."""
    encoding = harmony_encoding()
    if encoding is not None:
        h = _harmony()
        return encoding.decode_utf8(encoding.render_conversation_for_completion(conv, h.Role.ASSISTANT))
    return render_plain(conv)


def render_plain(conv: Any) -> str:
    """The Harmony text of a conversation of system / developer / user messages, without the vocabulary."""
    parts = []
    for message in conv.messages:
        role = message.author.role.value
        if message.author.name or message.channel or message.recipient or len(message.content) != 1:
            raise DatasetError("render_plain handles single-content system, developer and user messages only")
        content = message.content[0]
        if role == "system":
            body = _system_text(content)
        elif role == "developer":
            body = f"# Instructions\n\n{content.instructions}" if content.instructions else ""
        elif role == "user":
            body = content.text
        else:
            raise DatasetError(f"render_plain: unsupported role '{role}'")
        parts.append(f"<|start|>{role}<|message|>{body}<|end|>")
    return "".join(parts) + "<|start|>assistant"


def _system_text(content: Any) -> str:
    if content.tools or content.conversation_start_date:
        raise DatasetError("render_plain: system messages with tools or a date are not supported")
    lines = [content.model_identity] if content.model_identity else []
    if content.knowledge_cutoff:
        lines.append(f"Knowledge cutoff: {content.knowledge_cutoff}")
    text = "\n".join(lines)
    if content.reasoning_effort is not None:
        text += f"\n\nReasoning: {content.reasoning_effort.value.lower()}"
    channels = content.channel_config
    if channels is not None and channels.valid_channels:
        text += (f"\n\n# Valid channels: {', '.join(channels.valid_channels)}."
                 + (" Channel must be included for every message." if channels.channel_required else ""))
    return text


def answer_text(analysis: str, final: str) -> str:
    """A complete assistant turn after the prompt: reasoning in the analysis channel, the answer in the final
    channel, ended by ``<|return|>``."""
    return (f"<|channel|>analysis<|message|>{analysis}<|end|><|start|>assistant<|channel|>final<|message|>"
            f"{final}{RETURN}")
