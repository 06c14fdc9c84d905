"""The qwen3-vl-235b-a22b data set in its official layout: Hugging Face parquet files.

The benchmark reads ``Shopify/product-catalogue`` (revision d5c517c5) with its ``train`` and ``test`` splits
concatenated in that order (48289 rows); the Interactive scenario reads ``nvidia/Shopify-product-catalogue-8k``
(8000 rows). On disk either is a folder with ``data/<split>-XXXXX-of-YYYYY.parquet`` files, what
``datasets.load_dataset(<folder>)`` reads; mlharness reads the same files with pyarrow. Columns:

- ``product_image``: the image, a struct ``{bytes, path}`` (the encoded file, kept byte for byte);
- ``product_title``, ``product_description``: text (the description may hold HTML or source code);
- ``potential_product_categories``: a list of category paths the model chooses from;
- ``ground_truth_category`` (levels joined by " > "), ``ground_truth_brand``, ``ground_truth_is_secondhand``.

A row index of the concatenation is the sample index (``qsl_idx``), as in the reference.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, read_bytes_bounded

SPLITS = ("train", "test")  # concatenated in this order, as the reference's split="train+test"
FULL_COUNT = 48289
INTERACTIVE_COUNT = 8000
TEXT_COLUMNS = ("product_title", "product_description", "potential_product_categories", "ground_truth_category",
                "ground_truth_brand", "ground_truth_is_secondhand")
IMAGE_COLUMN = "product_image"
_SHARD = re.compile(r"^(?P<split>[A-Za-z0-9_]+)-\d+-of-\d+\.parquet$|^(?P<plain>[A-Za-z0-9_]+)\.parquet$")


def split_files(root: Path | str) -> list[Path]:
    """The parquet files of ``root/data`` (or ``root``), ``train`` shards first, then ``test``, each in name
    order; another split name is refused (the reference reads train+test only)."""
    root = Path(root).expanduser()
    folder = root / "data" if (root / "data").is_dir() else root
    if not folder.is_dir():
        raise DatasetError(f"qwen3-vl-235b-a22b: {root} is not a folder (pass --dataset-path: the folder of the "
                           "Shopify/product-catalogue download, with data/train-*.parquet and data/test-*.parquet; "
                           "`mlharness dataset synth qwen3-vl --out DIR` writes a synthetic one)")
    by_split: dict[str, list[Path]] = {s: [] for s in SPLITS}
    for path in sorted(folder.glob("*.parquet")):
        m = _SHARD.match(path.name)
        split = (m.group("split") or m.group("plain")) if m else None
        if split in by_split:
            by_split[split].append(path)
    files = [p for s in SPLITS for p in by_split[s]]
    if not files:
        raise DatasetError(f"qwen3-vl-235b-a22b: no train-*.parquet or test-*.parquet files in {folder}")
    return files


class CatalogueData:
    """The rows of a product-catalogue folder: text columns as Python values, images as their encoded bytes
    (read from the Arrow table on demand, never decoded here)."""

    def __init__(self, root: Path | str, with_images: bool = True):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.root = Path(root).expanduser()
        self.files = split_files(self.root)
        tables = []
        columns = [*TEXT_COLUMNS, *((IMAGE_COLUMN,) if with_images else ())]
        for path in self.files:
            # a shard of the download holds a few thousand rows with their images: some hundreds of MiB
            data = read_bytes_bounded(path, "qwen3-vl-235b-a22b data file", 4 * DATA_FILE_LIMIT, error=DatasetError)
            try:
                table = pq.read_table(io.BytesIO(data), columns=columns)
            except (OSError, ValueError, pa.ArrowException) as e:
                raise DatasetError(f"cannot read the qwen3-vl-235b-a22b data file {path}: {e}") from e
            tables.append(table)
        try:
            table = pa.concat_tables(tables)
        except (ValueError, pa.ArrowException) as e:
            raise DatasetError(f"{self.root}: the parquet files do not share one schema: {e}") from e
        if table.num_rows == 0:
            raise DatasetError(f"{self.root}: the data files hold no rows")
        self.columns = {name: table.column(name).to_pylist() for name in TEXT_COLUMNS}
        self._images = table.column(IMAGE_COLUMN) if with_images else None

    def __len__(self) -> int:
        return len(self.columns["product_title"])

    def row(self, index: int) -> dict[str, Any]:
        """The text columns of sample ``index`` (what the reference's ``dataset[index]`` holds besides the image)."""
        return {name: values[index] for name, values in self.columns.items()}

    def image_bytes(self, index: int) -> bytes:
        """The encoded image of sample ``index`` exactly as the data file holds it."""
        if self._images is None:
            raise DatasetError(f"{self.root}: read without images")
        value = self._images[index].as_py()
        data = value.get("bytes") if isinstance(value, dict) else value
        if isinstance(value, dict) and not data and value.get("path"):  # an image stored by path
            path = Path(value["path"])
            path = path if path.is_absolute() else self.root / path
            # a product photo is at most a few MiB
            data = read_bytes_bounded(path, f"sample {index}: image", 256 << 20, error=DatasetError)
        if not isinstance(data, bytes) or not data:
            raise DatasetError(f"sample {index}: '{IMAGE_COLUMN}' holds no image bytes")
        return data
