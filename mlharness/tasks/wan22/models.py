"""Models of the wan-2.2-t2v-a14b manifests: the diffusers ``WanPipeline`` as an ``nn.Module`` (the real
Wan2.2-T2V-A14B checkpoint, or tiny random networks built from configs), fed as the reference's
``run_mlperf.py`` feeds it: prompt, its negative prompt, guidance 4.0 then 3.0 past the boundary ratio 0.875
(two transformers), 20 steps, the generator seeded 42 and the fixed latent for every prompt.

The module takes prompts (UTF-8, zero-padded to ``CAPTION_BYTES``) and latents (N, 16, T, h, w) and returns
(N, frames, height, width, 3) uint8 videos: the pipeline's [0, 1] frames times 255, truncated, as
``export_to_video`` writes the mp4 files VBench reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from mlharness.errors import PredictorError
from mlharness.tasks.coco_t2i.models import DTYPES, decode_caption
from mlharness.tasks.wan22.dataset import (
    BOUNDARY_RATIO,
    GUIDANCE,
    GUIDANCE_2,
    NEGATIVE_PROMPT,
    SEED,
    STEPS,
    video_size,
)


class VideoGenerator(nn.Module):
    def __init__(self, pipe: Any, steps: int = STEPS, guidance: float = GUIDANCE, guidance_2: float = GUIDANCE_2,
                 seed: int = SEED, max_sequence_length: int = 512) -> None:
        super().__init__()
        self.pipe, self.steps, self.guidance, self.guidance_2 = pipe, int(steps), float(guidance), float(guidance_2)
        self.seed, self.max_sequence_length = int(seed), int(max_sequence_length)
        self.transformer = pipe.transformer  # registered, so .to() and eval() reach the weights
        # every network in inference mode, the unregistered ones too: built from a config (the random model)
        # they start in training mode, and UMT5's dropout (0.1) made each call's video differ from the last
        for part in getattr(pipe, "components", {}).values():
            if isinstance(part, nn.Module):
                part.eval()

    def forward(self, prompts: torch.Tensor, latents: torch.Tensor) -> torch.Tensor:
        texts = [decode_caption(row) for row in prompts]
        frames, height, width = video_size(tuple(latents.shape))
        device = self.transformer.device
        out = self.pipe(prompt=texts, negative_prompt=[NEGATIVE_PROMPT] * len(texts), height=height, width=width,
                        num_frames=frames, guidance_scale=self.guidance, guidance_scale_2=self.guidance_2,
                        num_inference_steps=self.steps, latents=latents.to(device, self.transformer.dtype),
                        generator=torch.Generator(device).manual_seed(self.seed), output_type="pt",
                        max_sequence_length=self.max_sequence_length).frames  # (N, F, 3, H, W) in [0, 1]
        finite = torch.isfinite(out).flatten(1).all(dim=1)
        if not bool(finite.all()):
            bad = texts[int((~finite).nonzero()[0])]
            raise PredictorError(f"wan-2.2: the video generated for prompt {bad[:80]!r} holds NaN or infinity")
        return (out.permute(0, 1, 3, 4, 2).float() * 255).to(torch.uint8)


def wan22(checkpoint: str, steps: int = STEPS, dtype: str = "bfloat16", device: str = "cuda") -> VideoGenerator:
    """``model.factory`` of wan-2.2-t2v-a14b: Wan-AI/Wan2.2-T2V-A14B-Diffusers from a local folder, loaded as the
    reference loads it (the VAE in float32, the rest in ``dtype``, boundary ratio 0.875)."""
    from diffusers import AutoencoderKLWan, WanPipeline

    path = Path(checkpoint).expanduser()
    if not (path / "model_index.json").is_file():
        raise PredictorError(f"wan-2.2-t2v-a14b: {path} is no diffusers checkpoint (no model_index.json); set "
                             f"framework.options.factory_args.checkpoint to the Wan2.2-T2V-A14B-Diffusers folder")
    vae = AutoencoderKLWan.from_pretrained(path, subfolder="vae", torch_dtype=torch.float32)
    pipe = WanPipeline.from_pretrained(path, boundary_ratio=BOUNDARY_RATIO, vae=vae,
                                       torch_dtype=DTYPES[dtype]).to(device)
    pipe.set_progress_bar_config(disable=True)
    return VideoGenerator(pipe, steps)


def byte_tokenizer() -> Any:
    """A tokenizer over the 256 byte values (as Latin-1 characters) with T5's pad and eos ids: the tiny UMT5
    encoder's vocabulary, built in memory (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{chr(b): 3 + b for b in range(256)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def random_wan(seed: int = 0, steps: int = 2, guidance: float = GUIDANCE, guidance_2: float = GUIDANCE_2
               ) -> VideoGenerator:
    """``model.factory`` of wan-2.2-t2v-a14b-random: the real ``WanPipeline`` code with two tiny random
    ``WanTransformer3DModel`` experts (switched at the boundary ratio), a tiny ``AutoencoderKLWan`` and UMT5
    encoder (seeded): a 5x32x32 video in a fraction of a second on a CPU."""
    from diffusers import (
        AutoencoderKLWan,
        FlowMatchEulerDiscreteScheduler,
        WanPipeline,
        WanTransformer3DModel,
    )
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(seed)

    def expert() -> WanTransformer3DModel:
        return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                     in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
                                     num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                     rope_max_seq_len=32)

    encoder = UMT5EncoderModel(UMT5Config(vocab_size=259, d_model=32, d_kv=8, d_ff=32, num_layers=1, num_heads=4,
                                          relative_attention_num_buckets=8))
    vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True])
    pipe = WanPipeline(tokenizer=byte_tokenizer(), text_encoder=encoder, vae=vae,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), transformer=expert(),
                       transformer_2=expert(), boundary_ratio=BOUNDARY_RATIO)
    pipe.set_progress_bar_config(disable=True)
    return VideoGenerator(pipe, steps, guidance, guidance_2, max_sequence_length=64)
