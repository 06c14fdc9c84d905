"""The reference's R-GAT checkpoint in the PyG model: its ``model_state_dict`` holds DGL names
(``model.layers.<i>.mods.<relation>.fc.weight``, ``attn_l``, ``attn_r``, ``bias``; ``model.linear``), mapped here onto
``HeteroConv``/``GATConv`` names (``convs.<i>.convs.<src>__<relation>__<dst>.lin.weight``, ``att_src``, ``att_dst``,
``bias``; ``lin``). DGL's ``attn_l`` scores the source side and ``attn_r`` the destination, as PyG's ``att_src`` and
``att_dst`` do. Not checked against the real file here (it is not downloaded in tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.errors import AssetError
from mlharness.fileguard import DATA_FILE_LIMIT, torch_load
from mlharness.tasks.rgat.models import ETYPES, rgat

_NAMES = {"fc.weight": "lin.weight", "attn_l": "att_src", "attn_r": "att_dst", "bias": "bias"}


def pyg_state(dgl_state: dict[str, Any]) -> dict[str, Any]:
    by_relation = {rel: f"{s}__{rel}__{d}" for s, rel, d in ETYPES}
    out = {}
    for key, value in dgl_state.items():
        name = key.removeprefix("model.")
        if name.startswith("linear."):
            out["lin." + name.removeprefix("linear.")] = value
            continue
        parts = name.split(".")  # layers, i, mods, relation, rest...
        if len(parts) < 5 or parts[0] != "layers" or parts[2] != "mods" or parts[3] not in by_relation:
            raise AssetError(f"rgat checkpoint: unexpected parameter '{key}' (expected the reference's DGL names)")
        rest = ".".join(parts[4:])
        if rest not in _NAMES:
            raise AssetError(f"rgat checkpoint: parameter '{key}' has no PyG counterpart")
        out[f"convs.{parts[1]}.convs.{by_relation[parts[3]]}.{_NAMES[rest]}"] = value
    return out


# where the reference gets RGAT.pt (graph/R-GAT/README.md): a metadata file of the MLCommons R2 downloader, which
# lists the file's URL and checksum when it is fetched; the repository itself has neither
R2_SOURCE = "https://inference.mlcommons-storage.org/metadata/rgat-model.uri"
R2_DOWNLOADER = "https://raw.githubusercontent.com/mlcommons/r2-downloader/refs/heads/main/mlc-r2-downloader.sh"


def rgat_checkpoint(checkpoint: str) -> Any:
    # RGAT.pt is tens of MiB (a DGL state dict of 3 GATConv layers over 11 relations): 1 GiB holds it with room
    state = torch_load(Path(checkpoint), "rgat checkpoint", DATA_FILE_LIMIT, error=lambda m: AssetError(
        f"{m} (factory_args.checkpoint: the reference's RGAT.pt, which mlharness cannot fetch itself: "
        f"graph/R-GAT/README.md publishes no plain URL and no checksum, only {R2_SOURCE} for the MLCommons R2 "
        f"downloader: bash <(curl -s {R2_DOWNLOADER}) {R2_SOURCE})"))
    if not isinstance(state, dict):
        raise AssetError(f"rgat checkpoint {checkpoint}: a state dict is expected, found {type(state).__name__}")
    model = rgat()
    model.load_state_dict(pyg_state(state.get("model_state_dict", state)), strict=True)
    return model
