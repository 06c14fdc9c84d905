"""The two scoring networks of stable-diffusion-xl: where their weights come from, and stand-ins for tests.

By default the real weights are downloaded once into the asset cache and verified: CLIP ViT-B/32 from OpenAI
(the sha256 is part of its URL) and the FID Inception from pytorch-fid's release (torch hub's convention: the
file name ends with the first 8 hex digits of its sha256). A ``networks`` folder overrides both: it holds
``clip.pt`` (an open_clip-style state dict, or the OpenAI TorchScript file) and ``inception.pth`` (the FID
Inception state dict). :func:`write_standin_networks` writes random-weight networks of the same architectures.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import AccuracyError, AssetError
from mlharness.fileguard import DATA_FILE_LIMIT, torch_load

CLIP_SHA256 = "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af"
CLIP_URL = f"https://openaipublic.azureedge.net/clip/models/{CLIP_SHA256}/ViT-B-32.pt"
INCEPTION_URL = ("https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/"
                 "pt_inception-2015-12-05-6726825d.pth")
INCEPTION_SHA256_PREFIX = "6726825d"
CLIP_FILE = "clip.pt"
INCEPTION_FILE = "inception.pth"


@dataclass(frozen=True)
class NetworkFiles:
    clip: Path
    inception: Path


def network_files(folder: Path | str | None) -> NetworkFiles:
    """The weight files to score with: ``folder``'s when given, else the official ones (downloaded, verified)."""
    if folder:
        folder = Path(folder)
        files = NetworkFiles(folder / CLIP_FILE, folder / INCEPTION_FILE)
        missing = [p.name for p in (files.clip, files.inception) if not p.is_file()]
        if missing:
            raise AccuracyError(f"networks folder {folder} lacks {', '.join(missing)} (expected {CLIP_FILE} and "
                                f"{INCEPTION_FILE})")
        return files
    from mlharness.fileguard import hash_file
    from mlharness.manifest.assets import resolve_asset

    try:
        clip = resolve_asset(CLIP_URL, checksum=f"sha256:{CLIP_SHA256}")
        inception = resolve_asset(INCEPTION_URL)
    except AssetError as e:
        raise AccuracyError(f"cannot get the official scoring networks ({e}); pass a networks folder holding "
                            f"{CLIP_FILE} and {INCEPTION_FILE}") from e
    digest = hash_file(inception, "FID Inception weights")
    if not digest.startswith(INCEPTION_SHA256_PREFIX):
        raise AccuracyError(f"FID Inception weights {inception}: sha256 {digest} does not start with "
                            f"{INCEPTION_SHA256_PREFIX} as its file name says")
    return NetworkFiles(clip, inception)


def load_inception(path: Path):
    from mlharness.tasks.coco_t2i.inception import FidInception

    net = FidInception()
    # pt_inception-2015-12-05 is 92 MiB: 1 GiB holds it with room
    state = torch_load(Path(path), "FID Inception weights", DATA_FILE_LIMIT, error=AccuracyError)
    try:
        net.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as e:
        raise AccuracyError(f"FID Inception weights {path} do not fit the network: {str(e)[:300]}") from e
    return net.eval()


def write_standin_networks(folder: Path | str, seed: int = 0) -> NetworkFiles:
    """Random-weight CLIP ViT-B/32 and FID Inception in the files a networks folder holds."""
    import torch

    from mlharness.tasks.coco_t2i import clip_net, inception

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(clip_net.random_state_dict(seed), folder / CLIP_FILE)
    torch.save(inception.random_state_dict(seed + 1), folder / INCEPTION_FILE)
    return NetworkFiles(folder / CLIP_FILE, folder / INCEPTION_FILE)
