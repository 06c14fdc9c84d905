"""VBench's environment and networks: where its Python is, how ``mlharness accuracy wan-2.2 --setup`` makes one,
and the scorer networks of the six dimensions, fetched by URL through mlharness's asset cache.

``vbench`` 0.1.5 pins transformers 4.33.2 and numpy<2 and does not declare torch, so its scorers run in a virtual
environment of their own, as a subprocess over the written videos (``vbench_child.py``). Its Python is, in this
order: the metric option ``vbench_python``, ``MLHARNESS_VBENCH_PYTHON``, then the environment ``--setup`` makes in
mlharness's cache (``<cache>/vbench-<version>/``). torch and torchvision are those of the reference's
``docker/requirements.txt`` (2.5.1, 0.20.1).

The reference runs VBench with ``--load_ckpt_from_local=True``: every network is read from VBench's cache folder
(``VBENCH_CACHE_DIR``), which VBench would fill with ``wget``. Here each file is fetched by mlharness
(:func:`fetch_weights`: URL, sha256, cache, no partial file left behind) and linked where VBench looks for it. Only
CLIP's files have a published sha256 (the folder of their URL, which ``clip._download`` checks); the others
(DINO, AMT-S, RAFT, Tag2Text) publish none, so they are fetched with "digest unknown": the sha256 obtained is
printed and said to be unverified, and nothing is invented. Tag2Text also loads bert-base-uncased's tokenizer from
the Hugging Face hub at run time (``HF_HOME``), which VBench does itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import AccuracyError
from mlharness.tasks.side_env import SideEnv

PYTHON_ENV = "MLHARNESS_VBENCH_PYTHON"  # the Python of an environment that has vbench
CACHE_ENV = "VBENCH_CACHE_DIR"  # where VBench reads its networks (vbench/utils.py's CACHE_DIR)
VBENCH_VERSION = "0.1.5"
PACKAGES = (f"vbench=={VBENCH_VERSION}", "torch==2.5.1", "torchvision==0.20.1")
CHECK_TIMEOUT_S = 300.0  # importing vbench imports torch, transformers, timm
SETUP_TIMEOUT_S = 3600.0
HOW_TO_FIX = (f"run 'mlharness accuracy wan-2.2 --setup' (it makes the environment and fetches the networks in "
              f"mlharness's cache, where runs find them) or set {PYTHON_ENV} to the Python of an environment with "
              f"vbench=={VBENCH_VERSION}")
ENV = SideEnv(package="vbench", version=VBENCH_VERSION, env_var=PYTHON_ENV, option="vbench_python",
              venv_name=f"vbench-{VBENCH_VERSION}",
              probe="from importlib.metadata import version; import vbench; print(version('vbench'))",
              installs=(PACKAGES,), what="vbench", needs="real VBench scoring needs vbench", how_to_fix=HOW_TO_FIX,
              owner="wan22", check_timeout_s=CHECK_TIMEOUT_S, setup_timeout_s=SETUP_TIMEOUT_S)
# the environment's functions, as the metric, the CLI and the tests call them
default_venv, find_python, check_python = ENV.default_venv, ENV.find_python, ENV.check_python
require_python, setup_commands, setup = ENV.require_python, ENV.setup_commands, ENV.setup

_CLIP_B32 = ("https://openaipublic.azureedge.net/clip/models/"
             "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af/ViT-B-32.pt")


@dataclass(frozen=True)
class Weight:
    """One network file: where VBench 0.1.5 downloads it from, its published sha256 (None: none is published),
    and where under VBench's cache it is expected (``member``: the file or folder inside an archive)."""

    dimensions: tuple[str, ...]
    url: str
    sha256: str | None
    target: str
    archive: bool = False
    member: str = ""


WEIGHTS = (
    Weight(("background_consistency", "appearance_style"), _CLIP_B32,
           "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af", "clip_model/ViT-B-32.pt"),
    Weight(("subject_consistency",), "https://dl.fbaipublicfiles.com/dino/dino_vitbase16_pretrain/"
           "dino_vitbase16_pretrain.pth", None, "dino_model/dino_vitbase16_pretrain.pth"),
    # VBench clones the repository for torch.hub's local load; its main branch as an archive is the same code
    Weight(("subject_consistency",), "https://github.com/facebookresearch/dino/archive/refs/heads/main.zip", None,
           "dino_model/facebookresearch_dino_main", archive=True, member="dino-main"),
    Weight(("motion_smoothness",), "https://huggingface.co/lalala125/AMT/resolve/main/amt-s.pth", None,
           "amt_model/amt-s.pth"),
    Weight(("dynamic_degree",), "https://dl.dropboxusercontent.com/s/4j4z58wuv8o0mfz/models.zip", None,
           "raft_model/models", archive=True, member="models"),
    Weight(("scene",), "https://huggingface.co/spaces/xinyu1205/recognize-anything/resolve/main/"
           "tag2text_swin_14m.pth", None, "caption_model/tag2text_swin_14m.pth"),
)


DIMENSIONS_ALL = tuple(sorted({d for w in WEIGHTS for d in w.dimensions}))


def default_weights_dir() -> Path:
    """VBench's cache folder as mlharness lays it out: ``<mlharness cache>/vbench-weights``."""
    from mlharness.manifest.assets import cache_dir

    return cache_dir() / "vbench-weights"


def fetch_weight(weight: Weight, weights_dir: Path, say=print) -> Path:  # noqa: ANN001 - a print-like callable
    """Fetch one network into mlharness's cache (verified when a sha256 is published; refused and nothing left
    behind on a mismatch) and link it where VBench looks; returns that path."""
    from mlharness.manifest.assets import file_digest, resolve_asset

    fetched = resolve_asset(weight.url, checksum=f"sha256:{weight.sha256}" if weight.sha256 else None,
                            is_archive=weight.archive, progress=True)
    if weight.sha256:
        say(f"{weight.url}: sha256 {weight.sha256} (verified)")
    else:
        archive = fetched.with_name(fetched.name.removesuffix(".extracted")) if weight.archive else fetched
        say(f"{weight.url}: sha256 {file_digest(archive, 'sha256')} (UNVERIFIED: no digest is published for it)")
    source = fetched / weight.member if weight.member else fetched
    if not source.exists():
        raise AccuracyError(f"{weight.url}: the archive has no {weight.member!r} ({fetched})")
    target = Path(weights_dir) / weight.target
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.exists():
        if target.resolve() == source.resolve():
            return target
        target.unlink()
    target.symlink_to(source, target_is_directory=source.is_dir())
    return target


def fetch_weights(dimensions: tuple[str, ...], weights_dir: Path | None = None, say=print) -> Path:  # noqa: ANN001
    """Every network the ``dimensions`` need, laid out as VBench's cache; returns that folder."""
    folder = Path(weights_dir) if weights_dir is not None else default_weights_dir()
    for weight in WEIGHTS:
        if set(weight.dimensions) & set(dimensions):
            fetch_weight(weight, folder, say)
    return folder
