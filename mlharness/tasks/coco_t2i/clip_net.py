"""CLIP ViT-B/32 as the reference's ``tools/clip/clip_encoder.py`` uses it (open_clip ``ViT-B/32`` with the
``openai`` weights), written with torch alone: the image transform, the byte-pair tokenizer and the two towers.

Parameter names are open_clip's, so the OpenAI checkpoint (a TorchScript file) and an open_clip state dict both
load unchanged. Only what the score needs is here: 224x224 images, 77-token texts, quick-GELU, class-token and
end-of-text pooling.
"""

from __future__ import annotations

import html
import importlib.util
import io
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mlharness.errors import AccuracyError
from mlharness.fileguard import read_bytes_bounded, read_gzip_bounded

# open_clip's bpe_simple_vocab_16e6.txt.gz is 1.3 MiB (1.6 MiB unpacked); the ViT-B/32 weights about 600 MiB
VOCAB_LIMIT = 16 << 20
WEIGHTS_LIMIT = 4 << 30

CONTEXT = 77
IMAGE_SIZE = 224
MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)
VOCAB_FILE = "bpe_simple_vocab_16e6.txt.gz"
_OPENAI_EXTRA_KEYS = ("input_resolution", "context_length", "vocab_size")


# --- image transform: Resize(224, bicubic) on the PIL image, CenterCrop(224), to RGB, ToTensor, Normalize ---

def preprocess(image) -> torch.Tensor:
    """(3, 224, 224) float32 of a PIL image, as open_clip's evaluation transform computes it."""
    from PIL import Image

    w, h = image.size
    short, long = (w, h) if w <= h else (h, w)
    if short != IMAGE_SIZE:
        new_long = int(IMAGE_SIZE * long / short)
        size = (IMAGE_SIZE, new_long) if w <= h else (new_long, IMAGE_SIZE)
        image = image.resize(size, Image.BICUBIC)
        w, h = image.size
    top, left = int(round((h - IMAGE_SIZE) / 2.0)), int(round((w - IMAGE_SIZE) / 2.0))
    image = image.crop((left, top, left + IMAGE_SIZE, top + IMAGE_SIZE))
    if image.mode != "RGB":
        image = image.convert("RGB")
    x = to_tensor(image)
    mean = torch.as_tensor(MEAN, dtype=x.dtype).view(-1, 1, 1)
    std = torch.as_tensor(STD, dtype=x.dtype).view(-1, 1, 1)
    return x.sub_(mean).div_(std)


def to_tensor(image) -> torch.Tensor:
    """torchvision's ToTensor of an 8-bit PIL image: (C, H, W) float32 divided by 255."""
    arr = np.array(image, np.uint8, copy=True)
    t = torch.from_numpy(arr).view(image.size[1], image.size[0], len(image.getbands()))
    return t.permute(2, 0, 1).contiguous().to(torch.float32).div(255)


# --- tokenizer: CLIP's byte-level BPE over ftfy-fixed, lower-cased text ---

def vocab_path() -> Path:
    """The BPE merges file open_clip ships (found without importing open_clip, which needs torchvision)."""
    spec = importlib.util.find_spec("open_clip")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / VOCAB_FILE
        if path.is_file():
            return path
    raise AccuracyError(f"CLIP score: the tokenizer's {VOCAB_FILE} was not found; install it with "
                        f"`pip install --no-deps open-clip-torch` (only its data file is used)")


def _bytes_to_unicode() -> dict[int, str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    codes = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, codes), strict=True))


class Tokenizer:
    def __init__(self, path: Path | None = None) -> None:
        import regex

        source = Path(path or vocab_path())
        text = read_gzip_bounded(source, "CLIP BPE vocabulary", VOCAB_LIMIT, error=AccuracyError)
        merges = text.decode("utf-8").split("\n")[1:49152 - 256 - 2 + 1]
        pairs = [tuple(m.split()) for m in merges]
        self.byte_encoder = _bytes_to_unicode()
        symbols = list(self.byte_encoder.values())
        vocab = symbols + [s + "</w>" for s in symbols] + ["".join(p) for p in pairs]
        vocab += ["<start_of_text>", "<end_of_text>"]
        self.encoder = {tok: i for i, tok in enumerate(vocab)}
        self.ranks = {p: i for i, p in enumerate(pairs)}
        self.sot, self.eot = self.encoder["<start_of_text>"], self.encoder["<end_of_text>"]
        self.pattern = regex.compile(r"<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|"
                                     r"[^\s\p{L}\p{N}]+", regex.IGNORECASE)
        self._bpe = lru_cache(maxsize=65536)(self._merge)

    def _merge(self, token: str) -> str:
        if token in ("<start_of_text>", "<end_of_text>"):
            return token
        word = (*token[:-1], token[-1] + "</w>")
        while len(word) > 1:
            pairs = {(a, b) for a, b in zip(word, word[1:], strict=False)}
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            out: list[str] = []
            i = 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = tuple(out)
        return " ".join(word)

    def encode(self, text: str) -> list[int]:
        import ftfy
        import regex

        text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
        text = regex.sub(r"\s+", " ", text).strip().lower()
        ids: list[int] = []
        for token in self.pattern.findall(text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self._bpe(token).split(" "))
        return ids

    def __call__(self, text: str) -> torch.Tensor:
        """(1, 77) int64: start, the text's tokens (cut to fit), end, zeros."""
        ids = [self.sot, *self.encode(text), self.eot]
        if len(ids) > CONTEXT:
            ids = ids[:CONTEXT]
            ids[-1] = self.eot
        out = torch.zeros(1, CONTEXT, dtype=torch.long)
        out[0, :len(ids)] = torch.tensor(ids)
        return out


# --- the two towers ---

class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(OrderedDict([("c_fc", nn.Linear(width, width * 4)), ("gelu", QuickGELU()),
                                              ("c_proj", nn.Linear(width * 4, width))]))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        y = self.ln_1(x)
        x = x + self.attn(y, y, y, need_weights=False, attn_mask=mask)[0]
        return x + self.mlp(self.ln_2(x))


class Stack(nn.Module):
    def __init__(self, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.resblocks = nn.ModuleList(Block(width, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for block in self.resblocks:
            x = block(x, mask)
        return x


class Visual(nn.Module):
    def __init__(self, width: int = 768, patch: int = 32, layers: int = 12, out: int = 512) -> None:
        super().__init__()
        grid = IMAGE_SIZE // patch
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch, stride=patch, bias=False)
        self.class_embedding = nn.Parameter(torch.zeros(width))
        self.positional_embedding = nn.Parameter(torch.zeros(grid * grid + 1, width))
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = Stack(width, layers, width // 64)
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(torch.zeros(width, out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        cls = self.class_embedding.view(1, 1, -1).expand(x.shape[0], -1, -1).to(x.dtype)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding.to(x.dtype)
        x = self.ln_post(self.transformer(self.ln_pre(x)))
        return x[:, 0] @ self.proj


class ClipViTB32(nn.Module):
    def __init__(self, width: int = 512, layers: int = 12, vocab: int = 49408) -> None:
        super().__init__()
        self.visual = Visual()
        self.transformer = Stack(width, layers, width // 64)
        self.token_embedding = nn.Embedding(vocab, width)
        self.positional_embedding = nn.Parameter(torch.zeros(CONTEXT, width))
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.zeros(width, 512))
        self.logit_scale = nn.Parameter(torch.ones([]))
        self.register_buffer("attn_mask", torch.full((CONTEXT, CONTEXT), float("-inf")).triu_(1),
                             persistent=False)

    def encode_image(self, x: torch.Tensor) -> torch.Tensor:
        return self.visual(x)

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(tokens) + self.positional_embedding
        x = self.ln_final(self.transformer(x, self.attn_mask))
        return x[torch.arange(x.shape[0]), tokens.argmax(dim=-1)] @ self.text_projection


def load_state(path: Path) -> dict[str, torch.Tensor]:
    """Weights from the OpenAI TorchScript checkpoint or from a plain state dict (open_clip's names)."""
    data = read_bytes_bounded(Path(path), "CLIP weights", WEIGHTS_LIMIT, error=AccuracyError)
    try:
        state = torch.jit.load(io.BytesIO(data), map_location="cpu").state_dict()
    except RuntimeError:
        try:
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch raises many types for a file it cannot read
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise AccuracyError(f"CLIP weights {path} are neither a TorchScript checkpoint nor a state dict: "
                                f"{first}") from None
    del data
    if not isinstance(state, dict):
        raise AccuracyError(f"CLIP weights {path}: expected a state dict, found {type(state).__name__}")
    return {k: v.float() for k, v in state.items() if k not in _OPENAI_EXTRA_KEYS}


class ClipScorer:
    """100 x cosine similarity of a caption and an image: the reference's ``get_clip_score``."""

    def __init__(self, weights: Path, vocab: Path | None = None) -> None:
        self.model = ClipViTB32()
        try:
            self.model.load_state_dict(load_state(weights), assign=True)  # no second copy of the weights
        except RuntimeError as e:
            raise AccuracyError(f"CLIP weights {weights} do not fit ViT-B/32: {str(e)[:300]}") from e
        self.model.eval()
        self.tokenizer = Tokenizer(vocab)

    @torch.no_grad()
    def similarity(self, caption: str, image) -> torch.Tensor:
        img = self.model.encode_image(preprocess(image).unsqueeze(0)).float()
        img /= img.norm(dim=-1, keepdim=True)
        txt = self.model.encode_text(self.tokenizer(caption)).float()
        txt /= txt.norm(dim=-1, keepdim=True)
        return img @ txt.T


def random_state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    """Weights of the right shapes for tests: the real ones cannot be downloaded everywhere. Every value is a
    float16 value (stored as float32): the official script loads CLIP through open_clip's OpenAI path, which
    rounds the convolution, linear, attention and projection weights to float16 before using them in float32,
    as the OpenAI checkpoint holds them. Weights that survive that rounding unchanged give the same score
    through the official loader and through ``load_state``."""
    torch.manual_seed(seed)
    net = ClipViTB32()
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith(("class_embedding", "positional_embedding", "proj", "projection")):
                p.normal_(0.0, 0.02 if "positional" in name else 0.05)
    return {k: v.half().float() if v.is_floating_point() else v for k, v in net.state_dict().items()}
