"""The reference's prompt (``multimodal/qwen3-vl`` ``task.py``: ``ShopifyGlobalCatalogue.formulate_loaded_sample``)
and the answer's schema (``schema.py``: ``ProductMetadata``).

The system prompt embeds ``ProductMetadata.model_json_schema()`` as ``json.dumps(..., indent=2)``; the user
message is the product's title, description and candidate categories (their Python list repr, as the reference's
f-string writes it) followed by the image as a data URL. The reference re-saves the decoded image in its own
format before encoding it; mlharness sends the data file's bytes unchanged (the rules forbid re-encoding images),
which for a PNG or JPEG from the data set is the same picture.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

from pydantic import BaseModel, ConfigDict


class ProductMetadata(BaseModel):
    """Json format for the expected responses from the VLM."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    category: str
    """The complete category of the product, e.g.,
    "Clothing & Accessories > Clothing > Shirts > Polo Shirts".
    Each categorical level is separated by " > ".
    """

    brand: str
    """The brand of the product, e.g., "giorgio armani"."""

    is_secondhand: bool
    """True if the product is second-hand, False otherwise."""


SCHEMA_JSON = json.dumps(ProductMetadata.model_json_schema(), indent=2)

SYSTEM_PROMPT = f"""Please analyze the product from the user prompt
and provide the following fields in a valid JSON object:
- category
- brand
- is_secondhand

You must choose only one, which is the most appropriate, correct, and specifc
category out of the list of possible product categories.

The description of the product sometimes contains various types of source code
(e.g., JavaScript, CSS, HTML, etc.), where useful product information is embedded
somewhere inside the source code. For this task, you should extract the useful
product information from the source code and leverage it, and discard the
programmatic parts of the source code.

Your response should only contain a valid JSON object and nothing more, e.g.,
you should not fence the JSON object inside a ```json code block.
The JSON object should match the followng JSON schema:
```json
{SCHEMA_JSON}
```
"""

RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "product_metadata",
                                                          "schema": ProductMetadata.model_json_schema(),
                                                          "strict": True}}


def user_text(row: dict[str, Any]) -> str:
    return f"""The title of the product is the following:
```text
{row['product_title']}
```

The description of the product is the following:
```text
{row['product_description']}
```

The following are the possible product categories:
```json
{row['potential_product_categories']}
```
"""


def image_format(data: bytes) -> str:
    """The image's format as PIL names it (PNG, JPEG, ...): what the reference writes into the data URL."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:  # reads the header only
        return im.format or "PNG"


def messages(row: dict[str, Any], image: bytes, guided: bool = False) -> dict[str, Any]:
    """The chat prompt of one product: ``{"messages": [...]}`` in the OpenAI form (what ``preprocess`` returns),
    with the reference's ``response_format`` when guided decoding is asked for (the v6.1 rules do not use it)."""
    url = f"data:image/{image_format(image)};base64,{base64.b64encode(image).decode('ascii')}"
    out: dict[str, Any] = {"messages": [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": [{"type": "text", "text": user_text(row)},
                                     {"type": "image_url", "image_url": {"url": url}}]},
    ]}
    if guided:
        out["response_format"] = RESPONSE_FORMAT
    return out


def answer_text(row: dict[str, Any]) -> str:
    """The ground truth as the JSON object the model is asked for (the oracle's answer)."""
    return json.dumps({"category": row["ground_truth_category"], "brand": row["ground_truth_brand"],
                       "is_secondhand": bool(row["ground_truth_is_secondhand"])})
