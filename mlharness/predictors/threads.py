"""The intra-op threads of a CPU framework whose pool would otherwise take every core (PyTorch, TensorFlow).

Their default pool has a thread per core, and its threads spin between parallel sections. During a run the
SUT's own threads and LoadGen's issue thread need a core as well, and on a shared host other processes take
some: a pool on every core then waits on preempted members. On a 2-core host with another process keeping one
core busy, a 2-thread PyTorch MLP (2048 wide, batch 4) took 23 ms per call against 6.5 ms with one thread (and
16 ms against 3.7 ms on the same host without that process). So, unless ``--threads`` (or the instances' share
of the cores) says otherwise, the pool leaves one usable core free.
"""

from __future__ import annotations

import os

GIVEN = "given: --threads, or the cores split between instances"


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask: a container's or --pin-cores' limit)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def intra_op_threads(given: int | None, framework_default: int | None = None) -> tuple[int, str]:
    """(threads, why): ``given`` when set; else one fewer than the usable cores (never more than the framework's
    own default, which counts physical cores), at least one."""
    if given:
        return int(given), GIVEN
    cores = usable_cores()
    if cores <= 1:
        return 1, "default: one usable core"
    threads = cores - 1
    if framework_default and framework_default < threads:
        return framework_default, (f"default: the framework's own {framework_default} (physical cores), under "
                                   f"the {cores} usable cores")
    return threads, (f"default: {threads} of the {cores} usable cores, one left for LoadGen and the SUT's "
                     f"threads (a pool on every core stalls when another thread takes one); --threads overrides")
