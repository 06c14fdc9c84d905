"""What the ``transformers`` predictor takes, checked before weights load, by ``run`` and ``manifest validate``
alike: one declared input (the prompt's token ids), and a checkpoint whose config ``AutoModelForCausalLM`` loads;
or one input of ``type: chat`` (checked by :mod:`.transformers_chat` at load).

A second declared input (``pixel_values`` of an image+text model) would be dropped by the token SUT, and a float
input would be cast to token ids; a checkpoint of another kind (a CTC speech model, LLaVA, a classifier) would
fail inside ``from_pretrained`` with a list of every causal LM class, or load with a new random head. Each is
refused with one paragraph naming the manifest, the field and the framework that does take it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import ManifestError

TAKES = "the transformers predictor loads causal language models (AutoModelForCausalLM: text in, text out)"

# transformers' auto-class tables (by model_type) that name what a checkpoint is, most specific first, with the
# framework that runs that kind of model; the first table holding the checkpoint's type or architecture wins.
KINDS = (
    ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "a speech-to-text encoder-decoder",
     "Use framework transformers-speech"),
    ("MODEL_FOR_CTC_MAPPING_NAMES", "a CTC speech recogniser",
     "Use framework pytorch (model.factory building it) or onnxruntime (an ONNX export)"),
    ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "an image+text-to-text model",
     "Declare its one input as chat messages (inputs: [{name: messages, type: chat}])"),
    ("MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES", "an image+text-to-text model",
     "Declare its one input as chat messages (inputs: [{name: messages, type: chat}])"),
    ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "a text encoder-decoder (seq2seq)",
     "Use framework openai (behind a server that serves it) or pytorch (model.factory)"),
    ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "an image classifier",
     "Use framework pytorch (model.factory) or onnxruntime (an ONNX export)"),
    ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "a sequence classifier",
     "Use framework pytorch (model.factory) or onnxruntime (an ONNX export)"),
)
OTHER = ("not a causal language model", "Use framework pytorch (model.factory) or onnxruntime (an ONNX export)")


def check_inputs(input_specs: list[dict[str, Any]], manifest: str | None) -> bool:
    """The predictor consumes one input per sample, the prompt's token ids: a further declared input, or a
    non-integer one, would be dropped or cast without a word. True when that input is chat messages (``type:
    chat``, which the schema keeps alone): an image+text model with its processor. A session input (``type:
    session``: multi-turn conversations with tools) is a causal LM's too, answered through its chat template."""
    if len(input_specs) == 1 and input_specs[0].get("type") == "chat":
        return True
    if len(input_specs) == 1 and input_specs[0].get("type") == "session":  # a causal LM with its chat template
        return False
    if len(input_specs) > 1:
        extra = ", ".join(f"'{s.get('name') or f'input {k}'}'" for k, s in enumerate(input_specs) if k)
        raise ManifestError(manifest, "inputs", f"declares {len(input_specs)} inputs, but {TAKES} and consumes "
                            f"one input per sample, the prompt's token ids (inputs[0] '{input_specs[0].get('name')}')"
                            f"; {extra} would be dropped. Remove it; an image+text model takes one input of type chat "
                            "(the prompt's messages, images included)")
    for spec in input_specs:
        element = str(spec.get("element_type", "float32"))
        try:
            integer = np.issubdtype(np.dtype(element), np.integer)
        except TypeError:
            integer = False
        if not integer:
            raise ManifestError(manifest, "inputs[0].element_type", f"'{element}' for input '{spec.get('name')}', "
                                f"but {TAKES}: its one input is the prompt's token ids (int32 or int64)")
    return False


def _auto_table(name: str) -> dict[str, Any]:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, name, {})


def _names(table: dict[str, Any], model_type: str | None = None) -> set[str]:
    values = [table.get(model_type)] if model_type is not None else list(table.values())
    out: set[str] = set()
    for v in values:
        out.update([v] if isinstance(v, str) else list(v or ()))
    return out


def _kind(model_type: str, architectures: list[str]) -> tuple[str, str]:
    for table_name, kind, use in KINDS:
        table = _auto_table(table_name)
        if model_type in table or set(architectures) & _names(table):
            return kind, use
    return OTHER


def read_config(checkpoint: Path, manifest: str | None) -> Any:
    """The checkpoint's config through ``AutoConfig`` (no weights are read), or a ManifestError naming it."""
    from transformers import AutoConfig

    field = "model.graph_path"
    if not (Path(checkpoint) / "config.json").is_file():
        raise ManifestError(manifest, field, f"{checkpoint} has no config.json: {TAKES}, from a checkpoint folder "
                            "written by save_pretrained (config.json, weights, tokenizer)")
    try:
        return AutoConfig.from_pretrained(str(checkpoint), local_files_only=True)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise ManifestError(manifest, field, f"transformers cannot read {checkpoint}/config.json: {first}") from None


def causal_lm_class(checkpoint: Path | str, manifest: str | None) -> str:
    """The AutoModelForCausalLM class name the checkpoint resolves to (from its config alone), or a ManifestError
    saying what the checkpoint is and which framework takes it."""
    config = read_config(Path(checkpoint), manifest)
    model_type = str(getattr(config, "model_type", "") or "")
    architectures = [str(a) for a in (getattr(config, "architectures", None) or [])]
    causal = _auto_table("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")
    own = _names(causal, model_type) if model_type in causal else set()
    # a config type AutoModelForCausalLM takes, saved from a causal LM class (or naming none): it loads as saved
    if own and (not architectures or set(architectures) & _names(causal)):
        return sorted(set(architectures) & own or own)[0]
    kind, use = _kind(model_type, architectures)
    saved = f", saved from {', '.join(architectures)}" if architectures else ""
    what = f"{type(config).__name__} (model_type '{model_type}'{saved})"
    head = (" AutoModelForCausalLM would load its type with a new, untrained language-model head" if own else "")
    raise ManifestError(manifest, "model.graph_path", f"{TAKES}; the checkpoint {checkpoint} holds {what}, "
                        f"{kind}.{head} {use}.")


def image_text_class(checkpoint: Path | str, manifest: str | None) -> str:
    """The AutoModelForImageTextToText class name a chat model's checkpoint resolves to (its config alone), or a
    ManifestError saying what the checkpoint is."""
    from mlharness.predictors.transformers_chat import image_text_class as model_class

    return model_class(read_config(Path(checkpoint), manifest), checkpoint, manifest).__name__
