"""The figure of a closed result's accuracy.txt against its target, as the official checker reads it
(``ACC_PATTERNS``: the first line its pattern matches, group 1), and the true comparison where the checker's is
known to mislead (:func:`checker_quirks`)."""

from __future__ import annotations

import re
from pathlib import Path

from mlharness.submission.findings import Findings
from mlharness.submission.rules import (
    ACC_PATTERNS,
    ACCURACY_WINDOWS,
    LOWER_IS_BETTER,
    PERCENT_AGAINST_FRACTION,
    Benchmark,
)


def check_accuracy_value(c: Findings, division: str, info: Benchmark | None, acc: Path, lines: list[str]) -> None:
    kinds = [info.accuracy_kind] if info else list(ACC_PATTERNS)
    value, kind = accuracy_value(lines, kinds)
    if value is not None:
        c.row.accuracy = f"{kind} {value:g}"
    if division != "open" and info is not None and info.name in ACCURACY_WINDOWS:
        check_accuracy_windows(c, info, acc, lines)
    elif division != "open" and info is not None:
        if value is None:
            c.error(acc / "accuracy.txt", f"holds no {info.accuracy_kind} figure")
        elif value < info.accuracy_target:
            c.error(acc / "accuracy.txt", f"{info.accuracy_kind} {value:g} is below the closed-division target "
                                          f"{info.accuracy_target:.7g} for {info.name}")
    if division != "open" and info is not None:
        checker_quirks(c, info, acc, lines)


def checker_quirks(c: Findings, info: Benchmark, acc: Path, lines: list[str]) -> None:
    """Where the official checker's accuracy verdict is known to mislead, its verdict stands (the findings above
    copy it) and a warning gives the true comparison, when the two disagree: a figure written with an exponent,
    which the checker's pattern reads up to it (dlrm-v3's ``1.683096022810316e-12`` as 1.683); rgat's percentage,
    which it holds to a fraction (any rgat line passes); dlrm-v3's NE, held to ">= target" though lower is
    better."""
    windows = ACCURACY_WINDOWS.get(info.name) or {info.accuracy_kind: (info.accuracy_target, float("inf"))}
    for kind, (low, high) in windows.items():
        read, written = figure_as_written(lines, kind)
        if read is None:
            continue
        passes = low <= read <= high  # the checker's verdict
        what = f"{kind} {written:g}"
        if info.name in PERCENT_AGAINST_FRACTION and kind == PERCENT_AGAINST_FRACTION[info.name]:
            truth, why = low <= written / 100.0 <= high, (f"{written:g}% is {written / 100.0:.6g} as a fraction, "
                                                         f"against the target {low:.6g} (a fraction)")
        elif (info.name, kind) in LOWER_IS_BETTER:
            bound = LOWER_IS_BETTER[(info.name, kind)]
            truth, why = written <= bound, (f"lower is better: the reference allows at most {bound:.8g}, the "
                                            f"checker holds it to at least {low:.8g}")
        elif written != read:
            truth, why = low <= written <= high, (f"the checker's pattern stops at the exponent and reads {read:g}; "
                                                  f"the window is [{low:.8g}, {high:.8g}]")
        else:
            continue
        if truth != passes:
            c.warning(acc / "accuracy.txt", f"{what}: the official checker {'passes' if passes else 'fails'} it, "
                                            f"the true comparison {'passes' if truth else 'fails'}: {why}")


def figure_as_written(lines: list[str], kind: str) -> tuple[float | None, float]:
    """The figure the checker's pattern reads, and the figure as written (with an exponent that follows it)."""
    for line in lines:
        m = re.match(ACC_PATTERNS[kind], line.strip())
        if m:
            exponent = re.match(r"[eE][-+]?\d+", line.strip()[m.end(1):])
            read = float(m.group(1))
            return read, float(m.group(1) + exponent.group(0)) if exponent else read
    return None, 0.0


def check_accuracy_windows(c: Findings, info: Benchmark, acc: Path, lines: list[str]) -> None:
    """Benchmarks whose figures must each lie inside a two-sided window (stable-diffusion-xl: CLIP and FID)."""
    for kind, (low, high) in ACCURACY_WINDOWS[info.name].items():
        value, _ = accuracy_value(lines, [kind])
        if value is None:
            c.error(acc / "accuracy.txt", f"holds no {kind} figure")
        elif value < low:
            c.error(acc / "accuracy.txt", f"{kind} {value:g} is below the lower bound {low:.10g} of its window "
                                          f"[{low:.10g}, {high:.10g}] for {info.name}")
        elif value > high:
            c.error(acc / "accuracy.txt", f"{kind} {value:g} is above the upper limit {high:.10g} of its window "
                                          f"[{low:.10g}, {high:.10g}] for {info.name}")


def accuracy_value(lines: list[str], kinds: list[str]) -> tuple[float | None, str | None]:
    for line in lines:
        for kind in kinds:
            m = re.match(ACC_PATTERNS[kind], line.strip())
            if m:
                return float(m.group(1)), kind
    return None, None


__all__ = ["accuracy_value", "check_accuracy_value", "check_accuracy_windows", "checker_quirks",
           "figure_as_written"]
