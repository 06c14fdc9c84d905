"""What the qwen3-vl-235b-a22b dataset manifests' hooks call: the catalogue of a run (from --dataset-path, or the
synthetic set in the cache for the test models) and each sample's chat prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.tasks.generative import dataset_root
from mlharness.tasks.qwen3_vl.dataset import CatalogueData
from mlharness.tasks.qwen3_vl.prompt import messages
from mlharness.tasks.qwen3_vl.synth import ensure_synthetic_qwen3_vl, synthetic_dir


class Catalogue:
    """The rows of a run's catalogue and their prompts (built at load time, untimed)."""

    def __init__(self, data: CatalogueData, guided: bool = False):
        self.data = data
        self.guided = guided

    def __len__(self) -> int:
        return len(self.data)

    def prompt(self, index: int) -> dict[str, Any]:
        """Sample ``index``'s chat prompt as the reference builds it (``{"messages": [...]}``)."""
        return messages(self.data.row(index), self.data.image_bytes(index), self.guided)


def qwen3_vl_dataset(ctx: dict[str, Any], interactive: bool = False) -> Catalogue:
    """For the dataset manifest's ``init``: the catalogue under ``--dataset-path`` (the full catalogue, or with
    ``interactive`` the 8k subset), else, for manifests with the attribute ``synthetic_qwen3_vl``, the synthetic
    one. ``dataset_attributes.guided_decoding`` adds the reference's response_format. Sets
    ``ctx["dataset_path"]`` for the accuracy metric."""
    name = "nvidia/Shopify-product-catalogue-8k" if interactive else "Shopify/product-catalogue"
    root = dataset_root(ctx, "synthetic_qwen3_vl",
                        lambda: ensure_synthetic_qwen3_vl(synthetic_dir(interactive), interactive=interactive),
                        f"qwen3-vl-235b-a22b needs --dataset-path: the folder of the {name} download (data/"
                        f"train-*.parquet, data/test-*.parquet; see docs/llm.md)")
    attrs = ctx.get("dataset_attributes") or {}
    data = CatalogueData(root)
    ctx["dataset_path"] = str(Path(root).expanduser())
    return Catalogue(data, bool(attrs.get("guided_decoding", False)))
