"""A synthetic BFCL v4 set in the official file layout: ``BFCL_v4_<subset>.json`` and
``possible_answer/BFCL_v4_<subset>.json`` for the twelve subsets of the MLPerf selection, a few entries each.

For tests and the oracle benchmark where bfcl-eval's real data (its wheel ships it) is not at hand: every kind of
call the AST checker judges is here (one call, one of several functions, several calls of one function, several of
several, dotted names, optional parameters, Java and JavaScript argument text, no call expected). Deterministic:
the same ``count`` and ``seed`` write the same bytes. Every subset has at most 25 entries at the default count, so
the MLPerf selection (subsets of 25 or fewer are taken whole) keeps them all.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from mlharness.tasks.generative import synthetic_cache

DEFAULT_COUNT = 3  # entries per subset


def _fn(name: str, desc: str, props: dict[str, tuple[str, str]], required: list[str], **extra: Any) -> dict:
    return {"name": name, "description": desc,
            "parameters": {"type": "dict", "required": required,
                           "properties": {k: {"type": t, "description": d} for k, (t, d) in props.items()}},
            **extra}


AREA = _fn("geometry.triangle_area", "Area of a triangle.",
           {"base": ("integer", "The base."), "height": ("integer", "The height."),
            "unit": ("string", "The unit, 'units' by default.")}, ["base", "height"])
WEATHER = _fn("get_weather", "Current weather of a city.",
              {"city": ("string", "The city."), "celsius": ("boolean", "Degrees Celsius, else Fahrenheit.")},
              ["city"])
SPEED = _fn("physics.final_speed", "Final speed of a falling object.",
            {"height": ("float", "Height in metres."), "gravity": ("float", "Gravity, 9.8 by default.")},
            ["height"])
TAGS = _fn("notes.tag", "Tag a note.", {"note_id": ("integer", "The note."), "tags": ("array", "The tags.")},
           ["note_id", "tags"])
TAGS["parameters"]["properties"]["tags"]["items"] = {"type": "string"}
JAVA = _fn("Cache.put", "Put a value in the cache.",
           {"key": ("String", "The key."), "ttl": ("long", "Seconds to live."), "pinned": ("boolean", "Pinned.")},
           ["key", "ttl"])
JS = _fn("renderChart", "Render a chart.",
         {"chartId": ("String", "The chart element."), "points": ("integer", "Number of points."),
          "animate": ("Boolean", "Animate the chart.")}, ["chartId", "points"])
CITIES = ("Paris", "Lima", "Oslo", "Kyoto", "Quito", "Accra")


def _entry(subset: str, i: int, text: str, functions: list[dict], truth: list[dict] | None,
           system: str | None = None) -> tuple[dict, dict | None]:
    ident = f"{subset}_{i}-{i}-0" if subset.startswith("live_") else f"{subset}_{i}"  # the official id forms
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    return ({"id": ident, "question": [messages], "function": functions},
            None if truth is None else {"id": ident, "ground_truth": truth})


def _subset_entries(subset: str, i: int, rng: random.Random) -> tuple[dict, dict | None]:
    b, h = rng.randint(2, 40), rng.randint(2, 40)
    city, other = rng.sample(CITIES, 2)
    area = {"geometry.triangle_area": {"base": [b], "height": [h], "unit": ["units", ""]}}
    weather = {"get_weather": {"city": [city], "celsius": [True, ""]}}
    weather2 = {"get_weather": {"city": [other], "celsius": [True, ""]}}
    if subset == "simple_python":
        return _entry(subset, i, f"Area of a triangle with base {b} and height {h}?", [AREA], [area])
    if subset == "simple_java":
        return _entry(subset, i, f"Help me cache `session{i}` for {b} seconds, pinned.", [JAVA],
                      [{"Cache.put": {"key": [f"session{i}"], "ttl": [b], "pinned": [True]}}])
    if subset == "simple_javascript":
        return _entry(subset, i, f"Render the chart `chart{i}` with {h} points.", [JS],
                      [{"renderChart": {"chartId": [f"chart{i}"], "points": [h], "animate": ["", False]}}])
    if subset == "multiple":
        return _entry(subset, i, f"What is the weather in {city} in Celsius?", [AREA, WEATHER, SPEED], [weather])
    if subset == "parallel":
        return _entry(subset, i, f"Weather in {city} and in {other}, in Celsius.", [WEATHER], [weather, weather2])
    if subset == "parallel_multiple":
        return _entry(subset, i, f"Weather in {city} in Celsius, and the area of a triangle of base {b} and "
                                 f"height {h}.", [AREA, WEATHER, TAGS], [weather, area])
    if subset == "live_simple":
        return _entry(subset, i, f"Tag note {b} with urgent and home.", [TAGS],
                      [{"notes.tag": {"note_id": [b], "tags": [["urgent", "home"]]}}])
    if subset == "live_multiple":
        return _entry(subset, i, f"How fast does a stone dropped from {h}.5 metres land?", [AREA, SPEED],
                      [{"physics.final_speed": {"height": [h + 0.5], "gravity": [9.8, ""]}}],
                      system="You are a helpful assistant with tools.")
    if subset == "live_parallel":
        return _entry(subset, i, f"Tag notes {b} and {h} as done.", [TAGS],
                      [{"notes.tag": {"note_id": [b], "tags": [["done"]]}},
                       {"notes.tag": {"note_id": [h], "tags": [["done"]]}}])
    if subset == "live_parallel_multiple":
        return _entry(subset, i, f"Tag note {b} as done and tell me the weather in {city} in Celsius.",
                      [TAGS, WEATHER], [{"notes.tag": {"note_id": [b], "tags": [["done"]]}}, weather])
    if subset == "irrelevance":
        return _entry(subset, i, f"Who wrote a novel set in {city}?", [AREA], None)
    if subset == "live_irrelevance":
        return _entry(subset, i, f"Translate 'hello' into the language of {city}.", [WEATHER, TAGS], None)
    raise ValueError(f"no synthetic entries for subset {subset!r}")


SUBSETS = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
           "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "irrelevance",
           "live_irrelevance")


def write_synthetic_bfcl_v4(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """Write ``count`` entries per subset under ``out`` (the files themselves, no ``data/`` level)."""
    if not 1 <= count <= 1000:
        raise ValueError(f"count must be from 1 to 1000 entries per subset, got {count}")
    out = Path(out)
    (out / "possible_answer").mkdir(parents=True, exist_ok=True)
    for n, subset in enumerate(SUBSETS):
        rng = random.Random(seed * 1000 + n)
        rows = [_subset_entries(subset, i, rng) for i in range(count)]
        (out / f"BFCL_v4_{subset}.json").write_text("".join(json.dumps(q) + "\n" for q, _ in rows),
                                                    encoding="utf-8")
        truths = [a for _, a in rows if a is not None]
        if truths:
            (out / "possible_answer" / f"BFCL_v4_{subset}.json").write_text(
                "".join(json.dumps(a) + "\n" for a in truths), encoding="utf-8")
    return out


def synthetic_dir() -> Path:
    """Where the oracle manifests keep the synthetic set when no --dataset-path is given."""
    return synthetic_cache("bfcl_v4_synth")


def ensure_synthetic(cache: Path | str | None = None) -> Path:
    """The synthetic set in ``cache`` (default: mlharness's cache), written when missing."""
    root = Path(cache) if cache is not None else synthetic_dir()
    if not (root / f"BFCL_v4_{SUBSETS[-1]}.json").is_file():
        write_synthetic_bfcl_v4(root)
    return root
