"""Chat prompts: a conversation of messages whose content mixes text and images, the prompt kind of image+text
models (a manifest input of ``type: chat``).

A dataset's ``preprocess`` returns the messages in the OpenAI chat form, at load time::

    [{"role": "system", "content": "..."},
     {"role": "user", "content": [{"type": "text", "text": "..."},
                                  {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}]}]

An image part may also be ``{"type": "image", "image": <bytes | PIL.Image | path>}``. :func:`parse_chat` checks
every message and part once, at load time, and keeps each image's encoded bytes exactly as the dataset holds them
(MLPerf forbids re-encoding or resizing a benchmark's images); what a predictor sends is derived from them once
and cached: the data URLs of an OpenAI-compatible request, the decoded images of an in-process processor. Nothing
is encoded on the timed path: a predictor builds what it sends for a prompt in its ``prepare``, which the QSL calls
as it loads the sample.

Bad input is a :class:`~mlharness.errors.DatasetError` (exit status 2) naming the sample, the message and the part:
an image that does not decode, a role or part type outside the known ones, an image over the input's stated caps
(``parameters: {max_image_bytes: N, max_image_pixels: N}``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import check_regular_file, read_bytes_bounded

ROLES = ("system", "user", "assistant")
PART_TYPES = ("text", "image_url", "image")
CHAT_INPUT = "chat"  # the manifest input type of a chat prompt
DEFAULT_MAX_IMAGE_BYTES = 64 << 20
DEFAULT_MAX_IMAGE_PIXELS = 64_000_000
_DATA_URL = re.compile(r"^data:(image/[A-Za-z0-9.+-]+)?(;[^,]*)?,(.*)$", re.S)
_MIME = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp", "BMP": "image/bmp",
         "TIFF": "image/tiff"}


@dataclass(frozen=True)
class ChatLimits:
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS

    @classmethod
    def from_spec(cls, parameters: dict[str, Any] | None) -> ChatLimits:
        """The caps of a chat input's ``parameters``; a cap that is not a positive whole number is refused."""
        p = parameters or {}
        caps = {}
        for name, default in (("max_image_bytes", DEFAULT_MAX_IMAGE_BYTES),
                              ("max_image_pixels", DEFAULT_MAX_IMAGE_PIXELS)):
            value = p.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DatasetError(f"the chat input's parameters.{name} must be a positive whole number, got "
                                   f"{value!r}")
            caps[name] = value
        return cls(**caps)


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True, eq=False)
class ImagePart:
    """One image, its bytes as the dataset encoded them, checked to decode."""

    data: bytes
    mime: str  # image/png, image/jpeg, ...
    width: int
    height: int

    @property
    def data_url(self) -> str:
        """``data:<mime>;base64,...`` of the original bytes (built on each call: a predictor that sends it keeps
        what it built, e.g. the endpoint client's request body, so the image is not held a third time)."""
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    def image(self) -> Any:
        """A decoded PIL image (RGB), for in-process processors."""
        from PIL import Image

        with Image.open(io.BytesIO(self.data)) as im:
            return im.convert("RGB")


Part = TextPart | ImagePart


@dataclass(frozen=True)
class Message:
    role: str
    parts: tuple[Part, ...]
    plain: bool = False  # the content was one string (kept as a string in requests)


@dataclass(frozen=True, eq=False)
class ChatPrompt:
    """A checked conversation. ``index``: the sample it belongs to."""

    index: int
    messages: tuple[Message, ...]
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. response_format, passed through to endpoints

    @property
    def images(self) -> list[ImagePart]:
        return [p for m in self.messages for p in m.parts if isinstance(p, ImagePart)]

    @property
    def text(self) -> str:
        """Every text part, in order (what a text-only tokenizer would count)."""
        return "\n".join(p.text for m in self.messages for p in m.parts if isinstance(p, TextPart))

    @cached_property
    def key(self) -> str:
        """sha256 of the conversation (roles, texts, each image's bytes): what an oracle's table is keyed by."""
        h = hashlib.sha256()
        for m in self.messages:
            h.update(f"\x00{m.role}\x00".encode())
            for p in m.parts:
                h.update(b"\x01" + (p.text.encode() if isinstance(p, TextPart) else hashlib.sha256(p.data).digest()))
        return h.hexdigest()

    @property
    def openai_messages(self) -> list[dict[str, Any]]:
        """The messages of a ``/v1/chat/completions`` body, images as data URLs (built on each call; the endpoint
        client builds its body from them once per sample, at load time)."""
        out = []
        for m in self.messages:
            if m.plain:
                out.append({"role": m.role, "content": m.parts[0].text if m.parts else ""})
                continue
            content = [{"type": "text", "text": p.text} if isinstance(p, TextPart)
                       else {"type": "image_url", "image_url": {"url": p.data_url}} for p in m.parts]
            out.append({"role": m.role, "content": content})
        return out

    def template_messages(self) -> list[dict[str, Any]]:
        """The messages for a Hugging Face processor's ``apply_chat_template``: ``{"type": "image", "image":
        PIL.Image}`` parts, decoded now (an in-process engine decodes as part of its own work)."""
        out = []
        for m in self.messages:
            content = [{"type": "text", "text": p.text} if isinstance(p, TextPart)
                       else {"type": "image", "image": p.image()} for p in m.parts]
            out.append({"role": m.role, "content": content})
        return out


def parse_chat(value: Any, index: int, limits: ChatLimits = ChatLimits()) -> ChatPrompt:
    """Check ``preprocess``'s messages for sample ``index`` and keep them as a :class:`ChatPrompt`."""
    extra: dict[str, Any] = {}
    if isinstance(value, ChatPrompt):
        return value
    if isinstance(value, dict) and "messages" in value:  # {"messages": [...], "response_format": ...}
        extra = {k: v for k, v in value.items() if k != "messages"}
        value = value["messages"]
    where = f"sample {index}"
    if not isinstance(value, list | tuple) or not value:
        raise DatasetError(f"{where}: a chat prompt is a non-empty list of messages, got {_kind(value)}")
    messages = []
    for i, msg in enumerate(value):
        here = f"{where}, message {i}"
        if not isinstance(msg, dict):
            raise DatasetError(f"{here}: a message is a mapping with 'role' and 'content', got {_kind(msg)}")
        role = msg.get("role")
        if role not in ROLES:
            raise DatasetError(f"{here}: unknown role {role!r}; expected one of {', '.join(ROLES)}")
        content = msg.get("content")
        if isinstance(content, str):
            messages.append(Message(role, (TextPart(content),), plain=True))
            continue
        if not isinstance(content, list | tuple):
            raise DatasetError(f"{here}: content is a string or a list of parts, got {_kind(content)}")
        parts = tuple(_part(p, f"{here}, part {j}", limits) for j, p in enumerate(content))
        messages.append(Message(role, parts))
    return ChatPrompt(index, tuple(messages), extra)


def _part(part: Any, here: str, limits: ChatLimits) -> Part:
    if not isinstance(part, dict):
        raise DatasetError(f"{here}: a content part is a mapping with a 'type', got {_kind(part)}")
    kind = part.get("type")
    if kind not in PART_TYPES:
        raise DatasetError(f"{here}: unknown content part type {kind!r}; expected one of {', '.join(PART_TYPES)}")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise DatasetError(f"{here}: a text part needs a 'text' string")
        return TextPart(part["text"])
    if kind == "image_url":
        url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else None
        if not isinstance(url, str):
            raise DatasetError(f"{here}: an image_url part needs image_url.url")
        m = _DATA_URL.match(url)
        if m is None:
            raise DatasetError(f"{here}: only data: URLs are read at load time (got {url[:40]!r}...); give the "
                               "image's bytes or a data URL")
        if len(m.group(3)) > limits.max_image_bytes * 4 // 3 + 4:
            raise DatasetError(f"{here}: the image is over the input's cap of {limits.max_image_bytes:,} bytes")
        try:
            data = base64.b64decode(m.group(3), validate=True) if ";base64" in (m.group(2) or "") else \
                m.group(3).encode("latin-1")
        except (binascii.Error, ValueError) as e:
            raise DatasetError(f"{here}: the data URL is not valid base64: {e}") from None
        return _image(data, here, limits)
    image = part.get("image")
    if isinstance(image, bytes | bytearray | memoryview):
        return _image(bytes(image), here, limits)
    if isinstance(image, str | Path):
        # through the one door: a FIFO would block the load for ever, a device never ends
        def error(message: str) -> DatasetError:
            return DatasetError(f"{here}: {message}")

        path = check_regular_file(Path(image), "the image", error=error)
        try:
            size = path.stat().st_size
        except OSError as e:
            raise DatasetError(f"{here}: cannot read the image {path}: {e.strerror or e}") from None
        if size > limits.max_image_bytes:
            raise DatasetError(f"{here}: the image {path} has {size:,} bytes, over the input's cap of "
                               f"{limits.max_image_bytes:,}")
        return _image(read_bytes_bounded(path, "the image", limits.max_image_bytes, error=error), here, limits)
    if hasattr(image, "save") and hasattr(image, "format"):  # a PIL image: its own bytes when it has a file format
        buf = io.BytesIO()
        image.save(buf, format=image.format or "PNG")
        return _image(buf.getvalue(), here, limits)
    raise DatasetError(f"{here}: an image part's 'image' is bytes, a path or a PIL image, got {_kind(image)}")


def _image(data: bytes, here: str, limits: ChatLimits) -> ImagePart:
    if len(data) > limits.max_image_bytes:
        raise DatasetError(f"{here}: the image has {len(data):,} bytes, over the input's cap of "
                           f"{limits.max_image_bytes:,} (parameters.max_image_bytes)")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height, fmt = im.width, im.height, im.format
            if width * height > limits.max_image_pixels:
                raise DatasetError(f"{here}: the image is {width}x{height} pixels, over the input's cap of "
                                   f"{limits.max_image_pixels:,} (parameters.max_image_pixels)")
            im.load()  # decodes every pixel: a truncated or corrupt file fails here, not on the timed path
    except DatasetError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise DatasetError(f"{here}: the image does not decode: {type(e).__name__}: {e}") from None
    return ImagePart(data, _MIME.get(fmt or "", f"image/{(fmt or 'png').lower()}"), width, height)


def _kind(value: Any) -> str:
    return type(value).__name__
