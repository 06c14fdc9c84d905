"""A run's accuracy as its own metric names it, with the direction that is better: WER as WER (lower is
better), not as ``accuracy = 100 - WER``; both FID and CLIP of an image-generation run; exact match and F1 of a
SQuAD-style run.

The figures are read from accuracy.txt (the text the official script prints, which the run's metadata also
keeps), with the submission checker's patterns where it has one, so the report names what the checker compares.
A text no pattern knows falls back on the figure and name mlharness recorded for the run."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mlharness.submission.rules import ACC_PATTERNS


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    higher_is_better: bool
    unit: str = ""

    def text(self) -> str:
        better = "higher" if self.higher_is_better else "lower"
        value = f"{self.value:,.1f}" if abs(self.value) >= 1000 else f"{self.value:,.5g}"  # never 1.8e+06
        return f"{self.name} {value}{self.unit} ({better} is better)"


_NUM = r"(-?[\d.]+(?:[eE][-+]?\d+)?)"
# (name, pattern, higher is better, unit) per family of texts; the first family with a match gives every figure
# of that family it matches (an SDXL text gives FID and CLIP, a SQuAD text exact match and F1)
_FAMILIES: tuple[tuple[tuple[str, str, bool, str], ...], ...] = (
    # whisper's accuracy_eval.py: "Word Error Rate: X%, accuracy=Y%" (accuracy is 100 - WER, negative past 100%)
    (("WER", rf"Word Error Rate:\s*{_NUM}%", False, "%"),),
    (("FID", ACC_PATTERNS["FID_SCORE"], False, ""), ("CLIP", ACC_PATTERNS["CLIP_SCORE"], True, "")),
    (("ROUGE-1", ACC_PATTERNS["ROUGE1"], True, ""), ("ROUGE-2", ACC_PATTERNS["ROUGE2"], True, ""),
     ("ROUGE-L", ACC_PATTERNS["ROUGEL"], True, "")),
    # SQuAD's evaluate script and the generic text metrics (JSON), deepseek-r1 / gpt-oss (a Python dict)
    (("exact match", rf"""["']exact_match["']:\s*'?{_NUM}""", True, ""),
     ("F1", rf"""["']f1["']:\s*'?{_NUM}""", True, "")),
    (("top-5", rf"top5_accuracy={_NUM}%", True, "%"),),
    (("top-1", rf"(?<![\w_])accuracy={_NUM}%", True, "%"),),
    (("mAP", rf"(?:mAP=|'Total':\s*){_NUM}", True, ""),),
    (("mean DICE", rf"mean\s*=\s*{_NUM}", True, ""),),
    (("mean absolute error", rf"^mae={_NUM}", False, ""),),
    (("mean squared error", rf"^mse={_NUM}", False, ""),),
)
# names of recorded figures that are better when lower (a metric the patterns above do not know)
_LOWER = re.compile(r"error|wer|fid|loss|mae|mse|perplexity|distance", re.IGNORECASE)


def from_text(text: str) -> list[Figure]:
    for family in _FAMILIES:
        found = []
        for name, pattern, higher, unit in family:
            m = re.search(pattern, text, re.MULTILINE)
            if m:
                try:
                    found.append(Figure(name, float(m.group(1)), higher, unit))
                except ValueError:
                    continue
        if found:
            return found
    return []


def figures(text: str | None, meta_accuracy: Any) -> list[Figure]:
    """The figures of a run: those its accuracy text names, else the one mlharness recorded (name, value)."""
    acc = meta_accuracy if isinstance(meta_accuracy, dict) else {}
    if not text and isinstance(acc.get("text"), str):
        text = acc["text"]
    found = from_text(text) if text else []
    if found:
        return found
    value, name = acc.get("value"), acc.get("name")
    if isinstance(value, int | float) and not isinstance(value, bool):
        name = str(name) if name else "accuracy"
        return [Figure(name, float(value), not _LOWER.search(name))]
    return []


def cell(found: list[Figure]) -> str:
    return "; ".join(f.text() for f in found)
