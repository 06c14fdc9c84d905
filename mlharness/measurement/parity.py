"""Cross-framework parity: run the same samples through two manifests (or two framework variants of one) and
compare the raw model outputs. No LoadGen involved: this checks the models, not the timing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlharness.errors import MLHarnessError
from mlharness.measurement.direct import DirectModel


@dataclass
class OutputDiff:
    index: int
    name: str | None
    linf: float
    l2: float
    agreement: float | None  # top-1 / argmax agreement (None when the output is not a score vector)


@dataclass
class ParityReport:
    a: str
    b: str
    samples: int
    outputs: list[OutputDiff] = field(default_factory=list)

    @property
    def linf(self) -> float:
        return max((o.linf for o in self.outputs), default=0.0)

    @property
    def agreement(self) -> float | None:
        values = [o.agreement for o in self.outputs if o.agreement is not None]
        return min(values) if values else None


def compare(a_ref: str, b_ref: str, dataset_path: str | None = None, count: int | None = None,
            batch: int = 8, device: str = "cpu") -> ParityReport:
    a = DirectModel(a_ref, dataset_path, count, batch, device)
    try:
        b = DirectModel(b_ref, dataset_path, count, batch, device)
    except BaseException:
        a.close()
        raise
    try:
        n = min(a.total, b.total)
        a.load(n)
        b.load(n)
        names = [o.name for o in a.loaded.model.outputs]
        sums: dict[int, dict[str, Any]] = {}
        for start in range(0, n, batch):
            idx = np.arange(start, min(n, start + batch), dtype=np.int64)
            out_a, out_b = a.outputs(idx), b.outputs(idx)
            if len(out_a) != len(out_b):
                raise MLHarnessError(f"{a_ref} gives {len(out_a)} outputs, {b_ref} gives {len(out_b)}")
            for k, (x, y) in enumerate(zip(out_a, out_b, strict=True)):
                _accumulate(sums.setdefault(k, {"linf": 0.0, "sq": 0.0, "agree": 0, "scored": 0}), x, y, k,
                            a_ref, b_ref)
        report = ParityReport(a_ref, b_ref, n)
        for k, s in sorted(sums.items()):
            report.outputs.append(OutputDiff(
                k, names[k] if k < len(names) else None, s["linf"], float(np.sqrt(s["sq"])),
                s["agree"] / s["scored"] if s["scored"] else None,
            ))
        return report
    finally:
        a.close()
        b.close()


def _accumulate(s: dict[str, Any], x: np.ndarray, y: np.ndarray, k: int, a_ref: str, b_ref: str) -> None:
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape:
        if x.size == y.size:
            y = y.reshape(x.shape)
        else:
            raise MLHarnessError(f"output {k}: {a_ref} has shape {x.shape}, {b_ref} has {y.shape}")
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    d = np.abs(xf - yf)
    s["linf"] = max(s["linf"], float(d.max()) if d.size else 0.0)
    s["sq"] += float((d * d).sum())
    if np.issubdtype(x.dtype, np.floating) and x.ndim >= 2 and x.shape[-1] > 1:
        # score vectors: compare the winners (top-1 for classifiers, per-position argmax otherwise)
        s["agree"] += int((xf.argmax(-1) == yf.argmax(-1)).sum())
        s["scored"] += int(np.prod(x.shape[:-1]))
    elif np.issubdtype(x.dtype, np.integer):
        s["agree"] += int((x == y).sum())
        s["scored"] += int(x.size)


def format_report(r: ParityReport, tolerance: float) -> str:
    lines = [f"parity of {r.a} vs {r.b} over {r.samples} samples"]
    for o in r.outputs:
        agree = "n/a" if o.agreement is None else f"{o.agreement:.6f}"
        lines.append(f"  output {o.index} ({o.name or '?'}): l-inf {o.linf:.3e}  l2 {o.l2:.3e}  agreement {agree}")
    ok = passes(r, tolerance)
    lines.append(f"{'AGREE' if ok else 'DISAGREE'} (tolerance {tolerance:g} on l-inf)")
    return "\n".join(lines)


def passes(r: ParityReport, tolerance: float) -> bool:
    return r.linf <= tolerance
