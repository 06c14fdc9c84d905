"""Models of the stable-diffusion-xl manifests: the diffusers SDXL pipeline as an ``nn.Module`` (the real
checkpoint, or a tiny random one built from configs), fed as the reference's ``backend_pytorch.py`` feeds it.

The module takes a batch of captions (UTF-8, zero-padded to ``CAPTION_BYTES``) and of initial latents (the fixed
(4, 128, 128) latent of ``latents.pt``) and returns (N, 1024, 1024, 3) uint8 images: the pipeline's float
output in [0, 1], times 255, rounded, as the reference's post-processing writes them. Generation follows the
reference: Euler discrete scheduler from the checkpoint's ``scheduler`` folder, 20 steps, guidance scale 8, its
negative prompt, no watermark.

:class:`ImageGenerator` wraps any diffusers text-to-image pipeline the same way (a model of another size, e.g.
a Stable Diffusion 1.x pipeline at 256x256 or 512x512: docs/image-generation.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mlharness.errors import PredictorError

CAPTION_BYTES = 512
STEPS = 20
GUIDANCE = 8.0
NEGATIVE_PROMPT = "normal quality, low quality, worst quality, low res, blurry, nsfw, nude"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MMAP_THRESHOLD = 1 << 20  # bytes: host buffers this large are mapped on their own and unmapped when freed
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def encode_caption(caption: str) -> np.ndarray:
    """The model input of a caption: its UTF-8 bytes, zero-padded to CAPTION_BYTES."""
    raw = caption.encode("utf-8")
    if len(raw) > CAPTION_BYTES or b"\0" in raw:
        raise PredictorError(f"caption {caption[:60]!r}...: {len(raw)} bytes; at most {CAPTION_BYTES}, no NUL")
    out = np.zeros(CAPTION_BYTES, np.uint8)
    out[:len(raw)] = np.frombuffer(raw, np.uint8)
    return out


def decode_caption(row: torch.Tensor) -> str:
    return bytes(row.cpu().numpy().astype(np.uint8)).rstrip(b"\0").decode("utf-8")


class ImageGenerator(nn.Module):
    """A diffusers text-to-image pipeline as an ``nn.Module``: captions (UTF-8 bytes, zero-padded) and,
    optionally, the initial latents in; (N, height, width, 3) uint8 images out, the pipeline's [0, 1] output
    times 255, rounded. With latents, the image is as large as they decode to (each side times the VAE's
    scale factor); without, the pipeline's default size, from a generator seeded with ``seed`` at every call
    (each batch starts from the same noise, as every benchmark prompt starts from one latent)."""

    def __init__(self, pipe: Any, steps: int = STEPS, guidance: float = GUIDANCE,
                 negative_prompt: str | None = None, seed: int = 0, name: str = "text-to-image model") -> None:
        super().__init__()
        self.pipe, self.steps, self.guidance = pipe, int(steps), float(guidance)
        self.negative_prompt, self.seed, self.name = negative_prompt, int(seed), name
        self.unet = pipe.unet  # registered, so .to() and eval() reach the weights

    def forward(self, captions: torch.Tensor, latents: torch.Tensor | None = None) -> torch.Tensor:
        prompts = [decode_caption(row) for row in captions]
        args: dict[str, Any] = dict(prompt=prompts, guidance_scale=self.guidance, num_inference_steps=self.steps,
                                    output_type="pt")
        if self.negative_prompt is not None:
            args["negative_prompt"] = [self.negative_prompt] * len(prompts)
        if latents is not None:
            scale = getattr(self.pipe, "vae_scale_factor", 8)
            args.update(latents=latents.to(self.unet.device, self.unet.dtype), height=latents.shape[-2] * scale,
                        width=latents.shape[-1] * scale)
        else:
            args["generator"] = torch.Generator(self.unet.device).manual_seed(self.seed)
        images = self.pipe(**args).images
        finite = torch.isfinite(images).flatten(1).all(dim=1)
        if not bool(finite.all()):  # the cast below would make them black pixels, scored as an image
            bad = [prompts[k] for k in (~finite).nonzero().flatten().tolist()]
            raise PredictorError(f"{self.name}: the image generated for caption {bad[0][:80]!r}"
                                 f"{f' (and {len(bad) - 1} more in the batch)' if len(bad) > 1 else ''} holds "
                                 f"NaN or infinity: the model's output is bad (a float16 overflow? non-finite "
                                 f"weights?), not an image")
        return (images.permute(0, 2, 3, 1).float() * 255).round().to(torch.uint8)


class SdxlModule(ImageGenerator):
    """The stable-diffusion-xl benchmark's generator: the reference's negative prompt, latents always given."""

    def __init__(self, pipe: Any, steps: int = STEPS, guidance: float = GUIDANCE,
                 negative_prompt: str = NEGATIVE_PROMPT) -> None:
        super().__init__(pipe, steps, guidance, negative_prompt, name="stable-diffusion-xl")


def return_large_buffers() -> bool:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD, process-wide. By default glibc raises the threshold each
    time a mapped block is freed (up to 32 MiB); after the first image, the image-sized buffers of every
    generation (latents decoded to 1024x1024, float images) come from the heap instead and fragment it, so a
    CPU accuracy run's resident memory grew by about 20 MiB per image (`scripts/bench_sdxl.py`) although no
    image is kept. Returns False where the C library has no mallopt (not glibc); nothing changes there."""
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def sdxl(checkpoint: str, steps: int = STEPS, guidance: float = GUIDANCE, dtype: str = "float32",
         device: str = "cpu") -> SdxlModule:
    """``model.factory`` of stable-diffusion-xl: the diffusers SDXL pipeline from a local checkpoint folder
    (stabilityai/stable-diffusion-xl-base-1.0 in diffusers layout, as the reference downloads it)."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline

    path = Path(checkpoint).expanduser()
    if not (path / "model_index.json").is_file():
        raise PredictorError(f"stable-diffusion-xl: {path} is no diffusers checkpoint (no model_index.json); set "
                             f"framework.options.factory_args.checkpoint to the SDXL base 1.0 folder")
    if dtype not in DTYPES:
        raise PredictorError(f"stable-diffusion-xl: dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    scheduler = EulerDiscreteScheduler.from_pretrained(path, subfolder="scheduler")
    if torch.device(device).type == "cpu":
        return_large_buffers()
    pipe = StableDiffusionXLPipeline.from_pretrained(path, scheduler=scheduler, add_watermarker=False,
                                                     torch_dtype=DTYPES[dtype]).to(device)
    pipe.set_progress_bar_config(disable=True)
    return SdxlModule(pipe, steps, guidance)


def random_sdxl(seed: int = 0, steps: int = STEPS, guidance: float = GUIDANCE) -> SdxlModule:
    """``model.factory`` of stable-diffusion-xl-random: the SDXL pipeline with tiny random-weight UNet, VAE and
    text encoders (seeded), the real pipeline code and scheduler settings, 1024x1024 out of the fixed latent."""
    from diffusers import (
        AutoencoderKL,
        EulerDiscreteScheduler,
        StableDiffusionXLPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    return_large_buffers()  # a CPU model
    torch.manual_seed(seed)
    text = dict(vocab_size=49408, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=77, projection_dim=32, hidden_act="gelu", bos_token_id=49406,
                eos_token_id=49407, pad_token_id=49407)
    unet = UNet2DConditionModel(
        sample_size=128, in_channels=4, out_channels=4, block_out_channels=(16, 32, 64), layers_per_block=1,
        down_block_types=("DownBlock2D", "DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D", "UpBlock2D"), norm_num_groups=16,
        attention_head_dim=(2, 2, 4), cross_attention_dim=64, use_linear_projection=True,  # attention at 32x32
        addition_embed_type="text_time", addition_time_embed_dim=8, projection_class_embeddings_input_dim=80)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 8, 8, 8),
                        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                        layers_per_block=1, norm_num_groups=4, sample_size=1024)
    scheduler = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                       steps_offset=1, timestep_spacing="leading", num_train_timesteps=1000)
    tokenizer = clip_tokenizer()
    pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=CLIPTextModel(CLIPTextConfig(**text)),
                                     text_encoder_2=CLIPTextModelWithProjection(CLIPTextConfig(**text)),
                                     tokenizer=tokenizer, tokenizer_2=tokenizer, unet=unet, scheduler=scheduler,
                                     add_watermarker=False)
    pipe.set_progress_bar_config(disable=True)
    return SdxlModule(pipe, steps, guidance)


def clip_tokenizer():
    """transformers' CLIPTokenizer over CLIP's BPE vocabulary (the one the CLIP score uses), written to a cache
    folder once."""
    from transformers import CLIPTokenizer

    from mlharness.manifest.assets import cache_dir
    from mlharness.tasks.coco_t2i.clip_net import Tokenizer

    folder = cache_dir() / "coco_t2i" / "clip-tokenizer"
    vocab, merges = folder / "vocab.json", folder / "merges.txt"
    if not (vocab.is_file() and merges.is_file()):
        folder.mkdir(parents=True, exist_ok=True)
        tok = Tokenizer()
        names = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}
        encoder = {names.get(k, k): v for k, v in tok.encoder.items()}
        pairs = sorted(tok.ranks, key=tok.ranks.__getitem__)
        tmp_vocab, tmp_merges = vocab.with_suffix(".tmp"), merges.with_suffix(".tmp")
        tmp_vocab.write_text(json.dumps(encoder), encoding="utf-8")
        tmp_merges.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in pairs), encoding="utf-8")
        tmp_vocab.replace(vocab)
        tmp_merges.replace(merges)
    return CLIPTokenizer(str(vocab), str(merges), model_max_length=77)
