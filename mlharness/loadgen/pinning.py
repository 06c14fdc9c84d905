"""Core pinning: the usable cores split between predictor instances, and a block run pinned to a group (the
threads a framework starts meanwhile inherit the mask)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from mlharness.errors import SettingsError


def core_sets(instances: int, cores: list[int] | None = None) -> list[set[int]]:
    """The usable cores split into ``instances`` contiguous groups (instance i gets group i)."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else sorted(cores)
    if instances > len(cores):
        raise SettingsError(f"--pin-cores: {instances} instances cannot each have a core of their own on "
                            f"{len(cores)} usable cores ({cores})")
    per, extra = divmod(len(cores), instances)
    groups, start = [], 0
    for i in range(instances):
        size = per + (1 if i < extra else 0)
        groups.append(set(cores[start:start + size]))
        start += size
    return groups


@contextmanager
def pinned(cores: set[int] | None) -> Iterator[None]:
    """Run the block with this thread pinned to ``cores``: threads a framework starts meanwhile (ONNX Runtime's
    intra-op pool) inherit the mask. The thread's own mask is restored afterwards."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
