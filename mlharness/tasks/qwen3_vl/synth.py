"""A synthetic product catalogue in the official layout (Hugging Face parquet files; images made locally).

``data/train-00000-of-00001.parquet`` and ``data/test-00000-of-00001.parquet`` (the Interactive subset: its own
rows in ``data/train-...`` only), with the columns of ``Shopify/product-catalogue`` and the ``huggingface``
schema metadata that makes ``datasets.load_dataset(<folder>)`` read ``product_image`` as an ``Image`` (a struct
``{bytes, path}``). Each product has a small picture drawn with PIL (PNG or JPEG, alternately), a title, a
description (some with HTML, as the real ones), 3-5 candidate categories of which one is the ground truth, a
brand and a second-hand flag. The same seed writes the same bytes.
"""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.tasks.generative import replace_file, synthetic_cache

DEFAULT_COUNT = 8
INTERACTIVE_DEFAULT_COUNT = 6
MARKER = "data/train-00000-of-00001.parquet"  # written last: its presence marks the set complete
TAXONOMY = (
    "Apparel & Accessories > Clothing > Shirts & Tops > Polo Shirts",
    "Apparel & Accessories > Clothing > Outerwear > Coats & Jackets",
    "Apparel & Accessories > Shoes > Athletic Shoes",
    "Home & Garden > Kitchen & Dining > Cookware & Bakeware > Frying Pans",
    "Home & Garden > Decor > Vases",
    "Home & Garden > Lighting > Lamps",
    "Electronics > Audio > Headphones",
    "Electronics > Computers > Laptops",
    "Sporting Goods > Outdoor Recreation > Cycling > Bicycles",
    "Toys & Games > Puzzles > Jigsaw Puzzles",
    "Health & Beauty > Personal Care > Cosmetics > Lipstick",
    "Hardware > Tools > Saws > Chainsaws",
)
BRANDS = ("giorgio armani", "Stihl", "kleankin", "Northwind", "Acme Outfitters", "Blue Heron", "Zephyr Audio",
          "Maple & Co", "Velo Works", "Lumière")
NOUNS = {"Polo Shirts": "polo shirt", "Coats & Jackets": "rain jacket", "Athletic Shoes": "running shoe",
         "Frying Pans": "frying pan", "Vases": "ceramic vase", "Lamps": "desk lamp", "Headphones": "headphones",
         "Laptops": "laptop", "Bicycles": "city bike", "Jigsaw Puzzles": "1000-piece puzzle",
         "Lipstick": "matte lipstick", "Chainsaws": "chain brake"}
FEATURES = {
    "product_image": {"_type": "Image"},
    "product_title": {"dtype": "string", "_type": "Value"},
    "product_description": {"dtype": "string", "_type": "Value"},
    "potential_product_categories": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"},
    "ground_truth_category": {"dtype": "string", "_type": "Value"},
    "ground_truth_brand": {"dtype": "string", "_type": "Value"},
    "ground_truth_is_secondhand": {"dtype": "bool", "_type": "Value"},
}


def _image(rng: random.Random, index: int) -> bytes:
    from PIL import Image, ImageDraw

    width, height = rng.randrange(24, 64), rng.randrange(24, 64)
    im = Image.new("RGB", (width, height), tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(im)
    for _ in range(3):
        x0, y0 = rng.randrange(width // 2), rng.randrange(height // 2)
        draw.rectangle((x0, y0, x0 + rng.randrange(4, width // 2 + 4), y0 + rng.randrange(4, height // 2 + 4)),
                       fill=tuple(rng.randrange(256) for _ in range(3)))
    buf = io.BytesIO()
    im.save(buf, format="PNG" if index % 2 == 0 else "JPEG")
    return buf.getvalue()


def records(count: int, seed: int, first: int = 0) -> list[dict[str, Any]]:
    """``count`` synthetic products (row ``first`` on: titles and images differ between sets)."""
    rng = random.Random(seed)
    rows = []
    for i in range(first, first + count):
        category = rng.choice(TAXONOMY)
        others = rng.sample([c for c in TAXONOMY if c != category], rng.randrange(2, 5))
        candidates = [*others]
        candidates.insert(rng.randrange(len(candidates) + 1), category)
        brand = rng.choice(BRANDS)
        noun = NOUNS[category.split(" > ")[-1]]
        secondhand = rng.random() < 0.3
        title = f"{brand.title()} {noun} #{i}" + (" (pre-owned)" if secondhand else "")
        description = (f"<div class=\"desc\"><p>A {noun} by {brand}.</p><script>var sku={i};</script></div>"
                       if i % 3 == 0 else f"{'Used' if secondhand else 'New'} {noun} from {brand}. Item {i}.")
        rows.append({"product_image": {"bytes": _image(rng, i), "path": None}, "product_title": title,
                     "product_description": description, "potential_product_categories": candidates,
                     "ground_truth_category": category, "ground_truth_brand": brand,
                     "ground_truth_is_secondhand": secondhand})
    return rows


def _write_split(path: Path, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([
        ("product_image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ("product_title", pa.string()), ("product_description", pa.string()),
        ("potential_product_categories", pa.list_(pa.string())), ("ground_truth_category", pa.string()),
        ("ground_truth_brand", pa.string()), ("ground_truth_is_secondhand", pa.bool_()),
    ], metadata={"huggingface": json.dumps({"info": {"features": FEATURES}})})
    table = pa.Table.from_pylist(rows, schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, lambda tmp: pq.write_table(table, tmp))


def write_synthetic_qwen3_vl(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0,
                             interactive: bool = False) -> Path:
    """Write a synthetic catalogue of ``count`` rows into ``out``: a quarter of them (at least one when there
    are two or more) in the ``test`` split, the rest in ``train``; the Interactive subset all in ``train``."""
    out = Path(out)
    if count < 1:
        raise DatasetError(f"synthetic qwen3-vl: count must be >= 1, got {count}")
    try:
        (out / MARKER).unlink(missing_ok=True)
        shutil.rmtree(out / "data", ignore_errors=True)
        rows = records(count, seed + (1000 if interactive else 0), first=100_000 if interactive else 0)
        n_test = 0 if interactive or count < 2 else max(1, count // 4)
        if n_test:
            _write_split(out / "data" / "test-00000-of-00001.parquet", rows[count - n_test:])
        _write_split(out / MARKER, rows[:count - n_test])
    except OSError as e:
        raise DatasetError(f"synthetic qwen3-vl: cannot write {out}: {e}") from e
    return out


def synthetic_dir(interactive: bool = False) -> Path:
    """Where the oracle and random manifests keep the synthetic set when no --dataset-path is given."""
    return synthetic_cache("qwen3_vl_synth_8k" if interactive else "qwen3_vl_synth")


def ensure_synthetic_qwen3_vl(out: Path | str, count: int | None = None, seed: int = 0,
                              interactive: bool = False) -> Path:
    """The synthetic set in ``out``, written unless one of ``count`` rows is complete there."""
    import pyarrow.parquet as pq

    out = Path(out)
    count = count or (INTERACTIVE_DEFAULT_COUNT if interactive else DEFAULT_COUNT)
    try:
        rows = sum(pq.read_metadata(p).num_rows for p in (out / "data").glob("*.parquet"))
        if (out / MARKER).is_file() and rows == count:
            return out
    except (OSError, ValueError):
        pass
    return write_synthetic_qwen3_vl(out, count, seed, interactive)
