"""The model inputs of the ``coco-captions`` dataset manifest, for any text-to-image model.

Input 0 is the caption: its UTF-8 bytes zero-padded to 512 (``models.encode_caption``). An optional input 1 is
the initial latent every prompt starts from, as the benchmark fixes one: a model declaring the benchmark's
[4, 128, 128] gets ``latents/latents.pt``; one declaring another shape (e.g. [4, 32, 32] for a 256x256 image out
of a VAE that downsamples 8 times) gets one seeded standard-normal latent of that shape (the dataset attribute
``latent_seed``), the same for every caption. The declared image size is checked when the dataset is opened,
before any model loads (``resolution.declared_image_shape``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlharness.errors import ManifestError
from mlharness.tasks.coco_t2i.dataset import LATENT_SHAPE, LATENTS, caption_set, read_latents
from mlharness.tasks.coco_t2i.models import CAPTION_BYTES, encode_caption
from mlharness.tasks.coco_t2i.resolution import declared_image_shape

MAX_LATENT_VALUES = 1 << 24  # a declared latent of more values is a mistake (the benchmark's: 65,536)


class CaptionInputs:
    def __init__(self, ctx: dict[str, Any], count: int | None, benchmark: str | None = None) -> None:
        self.image_shape = declared_image_shape(ctx, benchmark)
        inputs = ctx.get("inputs") or []
        manifest = f"model manifest '{ctx.get('name')}'"
        if not 1 <= len(inputs) <= 2:
            raise ManifestError(manifest, "inputs", f"declares {len(inputs)} inputs; the coco-captions dataset "
                                                    f"gives a caption and, optionally, an initial latent")
        caption = inputs[0]
        if caption.get("element_type") not in (None, "uint8") or list(caption.get("shape") or []) != [CAPTION_BYTES]:
            raise ManifestError(manifest, "inputs[0]", f"is {caption.get('element_type')} of shape "
                                                       f"{caption.get('shape')}; the caption input is its UTF-8 "
                                                       f"bytes: element_type uint8, shape [{CAPTION_BYTES}]")
        self.captions = caption_set(ctx.get("dataset_path"), count)
        self.latent = self._latent(inputs[1], ctx, manifest) if len(inputs) == 2 else None
        self.loaded: dict[int, tuple[np.ndarray, ...]] = {}

    def _latent(self, spec: dict[str, Any], ctx: dict[str, Any], manifest: Any) -> np.ndarray:
        shape = spec.get("shape")
        ok = (isinstance(shape, list) and shape and all(isinstance(v, int) and v > 0 for v in shape)
              and int(np.prod(shape)) <= MAX_LATENT_VALUES)
        if not ok or spec.get("element_type") not in (None, "float32"):
            raise ManifestError(manifest, "inputs[1]", f"is {spec.get('element_type')} of shape {shape}; the "
                                                       f"latent input is float32 of a fixed shape (e.g. [4, 32, "
                                                       f"32]), at most {MAX_LATENT_VALUES:,} values")
        if tuple(shape) == LATENT_SHAPE[1:]:  # the benchmark's fixed latent
            return read_latents(self.captions.root / LATENTS)[0].numpy()
        seed = (ctx.get("dataset_attributes") or {}).get("latent_seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ManifestError("the coco-captions dataset manifest", "attributes.latent_seed",
                                f"is {seed!r}; expected a whole number >= 0")
        return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.captions.captions)

    def load(self, indices: list[int]) -> None:
        for index in indices:
            caption = encode_caption(self.captions.captions[index])
            self.loaded[index] = (caption,) if self.latent is None else (caption, self.latent)

    def unload(self, indices: list[int]) -> None:
        for index in indices:
            self.loaded.pop(index, None)

    def sample(self, index: int) -> tuple[np.ndarray, ...]:
        return self.loaded[index]
