"""Chat prompts in-process with transformers: the checkpoint's own processor and chat template, and the
image+text-to-text model class its config names.

A batch of :class:`~mlharness.predictors.chat.ChatPrompt` becomes one left-padded batch of model inputs through
``processor.apply_chat_template`` (the template turns each conversation into text with an image placeholder per
image, the image processor makes the pixel values, the placeholders grow to the image's token count). The
generated ids are decoded with the processor's tokenizer where the manifest asks for text (``response.text``).

Processors of video-capable models (Qwen2/2.5/3-VL and others) hold a video processor, and transformers makes
video processors only with torchvision. An image prompt never uses it, so where torchvision is absent, or the
checkpoint has no video processor's config, the processor is built without one (:func:`processor_class`) rather
than not at all.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

from mlharness.errors import ManifestError, MLHarnessError
from mlharness.fileguard import parse_json, read_bytes_bounded
from mlharness.predictors.chat import ChatPrompt

TAKES = "a chat prompt runs on an image+text-to-text model (AutoModelForImageTextToText) with its processor"


@functools.cache
def processor_class(name: str, video: bool | None = None) -> Any:
    """transformers' processor class ``name``, or (``video`` False; by default, where torchvision is absent) one
    without a video processor: the same name, so a processor saved from it names the real class."""
    import transformers

    cls = getattr(transformers, name)
    if video is None:
        video = importlib.util.find_spec("torchvision") is not None
    if video or "video_processor" not in cls.get_attributes():
        return cls

    def __init__(self: Any, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None,
                 **kwargs: Any) -> None:
        # the attributes transformers checks are this signature's: the image processor and the tokenizer
        cls.__init__(self, image_processor=image_processor, tokenizer=tokenizer, video_processor=None,
                     chat_template=chat_template, **kwargs)

    return type(name, (cls,), {"__init__": __init__, "__module__": cls.__module__})


CONFIG_LIMIT = 64 << 20
"""Most bytes read of a checkpoint's processor_config.json (a few KiB)."""


def _processor_name(folder: Path, config: Any) -> str | None:
    path = folder / "processor_config.json"
    name = None
    if path.exists():  # a FIFO or a device there is an error naming it; a malformed config names no class
        data = read_bytes_bounded(path, "processor config", CONFIG_LIMIT)
        try:
            name = parse_json(data, f"processor config {path}").get("processor_class")
        except (MLHarnessError, AttributeError):
            name = None
    if not name:
        from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

        name = PROCESSOR_MAPPING_NAMES.get(getattr(config, "model_type", ""))
    return name if isinstance(name, str) else None


def load_processor(folder: Path | str, config: Any, manifest: str | None) -> Any:
    """The checkpoint's processor (left padding, so a batch's next tokens share a position)."""
    from transformers import AutoProcessor

    folder = Path(folder)
    name = _processor_name(folder, config)
    known = bool(name) and hasattr(__import__("transformers"), name)
    try:
        try:
            processor = (processor_class(name) if known else AutoProcessor).from_pretrained(str(folder),
                                                                                          local_files_only=True)
        except (OSError, ValueError) as e:  # a checkpoint saved without a video processor: images need none
            if not known or "video_processor" not in processor_class(name).get_attributes():
                raise e from None
            processor = processor_class(name, video=False).from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise ManifestError(manifest, "model.graph_path", f"{TAKES}; transformers cannot load the processor "
                            f"of {folder}: {first}") from None
    if getattr(processor, "tokenizer", None) is None or not hasattr(processor, "apply_chat_template"):
        raise ManifestError(manifest, "model.graph_path", f"{TAKES}; {folder} holds a {type(processor).__name__}, "
                            "which has no tokenizer and chat template")
    if processor.chat_template is None and getattr(processor.tokenizer, "chat_template", None) is None:
        raise ManifestError(manifest, "model.graph_path", f"{TAKES}; the processor of {folder} has no chat template "
                            "(chat_template.jinja or the tokenizer's)")
    processor.tokenizer.padding_side = "left"
    return processor


def image_text_class(config: Any, checkpoint: Path | str, manifest: str | None) -> Any:
    """The model class for the checkpoint's config: AutoModelForImageTextToText's (or Vision2Seq's) entry."""
    from transformers import AutoModelForImageTextToText

    try:
        return AutoModelForImageTextToText._model_mapping[type(config)]
    except KeyError:
        pass
    kind = getattr(config, "model_type", "?")
    raise ManifestError(manifest, "model.graph_path", f"{TAKES}; the checkpoint {checkpoint} holds "
                        f"{type(config).__name__} (model_type '{kind}'), which AutoModelForImageTextToText does "
                        "not load: its input is not chat messages with images (declare a token-id input instead)")


def encode(processor: Any, prompts: list[ChatPrompt], device: str) -> dict[str, Any]:
    """One left-padded batch of model inputs for ``prompts`` (images decoded here: the engine's own work)."""
    batch = processor.apply_chat_template(
        [p.template_messages() for p in prompts], add_generation_prompt=True, tokenize=True, return_dict=True,
        return_tensors="pt", processor_kwargs={"padding": True})
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}
