#!/usr/bin/env python3
"""rgat: the graph's node features are memory-mapped, not copied per worker. Peak RSS, PSS and USS side by side
for 1 and 4 workers, as threads (what ``--workers`` runs: one process, one graph) and as forked processes.

A synthetic IGBH whose feature tables are large (about ``--mb`` MiB, default 300) is written to a temporary
folder and opened once (``open_graph``: memory-mapped features, the incoming-edge index built in memory). Each
worker then samples ``--samples`` seed papers ([5, 10, 15] neighbourhoods with their feature rows, the timed
path's work) and afterwards reads every page of every feature table once, so that all of the file has been
touched by every worker. Were the features copied per worker, each worker's private memory (USS) would grow by
the tables' size; memory-mapped, the pages are the page cache's, shared: RSS counts them in each process, PSS
splits them between the processes that map them, USS counts them only where one process alone maps them (a
lone worker's USS holds the whole file: that is no copy), and the anonymous memory (what a copy would be) does
not count them at all.

The figures come from ``/proc/<pid>/smaps_rollup`` (Linux): Rss, Pss, Private_Clean + Private_Dirty (USS) and
Anonymous; the peak RSS from ``getrusage`` (ru_maxrss; a forked child starts from its parent's).

    .venv/bin/python scripts/bench_rgat_memory.py                       # 300 MiB of features, 200 samples
    .venv/bin/python scripts/bench_rgat_memory.py --mb 8 --samples 8    # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

NODES_PER_PAPER = 2.7  # write_synthetic_igbh's node tables: 1 paper, 1.5 authors, and small fos/institute/venues
DIM = 1024  # IGBH's feature width
MIB = 1024 * 1024


def say(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def smaps() -> dict[str, float]:
    """This process's Rss, Pss and USS now, and its peak RSS, in MiB."""
    fields: dict[str, float] = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = float(value.split()[0]) / 1024  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rss": fields["Rss"], "pss": fields["Pss"],
            "uss": fields["Private_Clean"] + fields["Private_Dirty"], "anon": fields["Anonymous"], "peak_rss": peak}


def work(graph: Any, seeds: np.ndarray) -> int:
    """One worker's share: each seed's neighbourhood and its feature rows, then every page of every table."""
    rows = 0
    for seed in seeds:
        rows += sum(a.shape[0] for a in graph.sample_arrays(np.array([seed]))[: len(graph.ntypes)])
    for table in graph.features.values():  # read through the map, a block at a time: nothing kept
        for start in range(0, table.shape[0], 4096):
            float(table[start:start + 4096, 0].sum())
    return rows


def seeds_of(graph: Any, samples: int, worker: int) -> np.ndarray:
    rng = np.random.default_rng(worker)
    return rng.integers(0, graph.nodes("paper"), samples)


def with_threads(graph: Any, workers: int, samples: int) -> dict[str, Any]:
    threads = [threading.Thread(target=work, args=(graph, seeds_of(graph, samples, w))) for w in range(workers)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return {"seconds": time.perf_counter() - t, "process": smaps()}


def with_processes(graph: Any, workers: int, samples: int) -> dict[str, Any]:
    """``workers`` children forked after the graph was opened; each reports its own figures once every one of
    them has done its work, while all still map the files (so PSS is split between all of them)."""
    pipes, pids = [], []
    done_r, done_w = os.pipe()  # a byte from each child whose work is done
    go_r, go_w = os.pipe()  # closed by the parent when every child's work is done
    t = time.perf_counter()
    for w in range(workers):
        r, wr = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.close(r)
            os.close(go_w)
            work(graph, seeds_of(graph, samples, w))
            peak = smaps()["peak_rss"]
            os.write(done_w, b"x")
            os.read(go_r, 1)  # returns at end of file: the parent closed its end
            os.write(wr, json.dumps({**smaps(), "peak_rss": peak}).encode())
            os._exit(0)
        os.close(wr)
        pipes.append(r)
        pids.append(pid)
    for _ in range(workers):
        os.read(done_r, 1)
    seconds = time.perf_counter() - t
    os.close(go_w)
    reports = []
    for r, pid in zip(pipes, pids, strict=True):
        reports.append(json.loads(_read_all(r)))
        os.waitpid(pid, 0)
    for fd in (done_r, done_w, go_r):
        os.close(fd)
    return {"seconds": seconds, "workers": reports, "parent": smaps()}


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=300.0, help="size of the feature tables in MiB (default 300)")
    ap.add_argument("--samples", type=int, default=200, help="seed papers sampled by each worker (default 200)")
    ap.add_argument("--workers", type=int, nargs=2, default=(1, 4), metavar=("FEW", "MANY"))
    ap.add_argument("--dir", type=Path, help="where to write the graph (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)

    import torch

    from mlharness.kinds.graph.input import GraphSettings, open_graph
    from mlharness.tasks.rgat.synth import write_synthetic_igbh

    # one intra-op thread before any torch work: a child forked after torch started its OpenMP pool hangs in its
    # first parallel op (the workers here are the threads and processes measured)
    torch.set_num_threads(1)

    papers = max(40, int(args.mb * MIB / (NODES_PER_PAPER * DIM * 4)))
    with tempfile.TemporaryDirectory(prefix="bench-rgat-", dir=args.dir) as tmp:
        say(f"writing a synthetic IGBH of {papers:,} papers ({DIM} features per node) to {tmp}")
        write_synthetic_igbh(Path(tmp), papers=papers, dim=DIM)
        graph = open_graph(Path(tmp) / "tiny" / "processed", GraphSettings())
        files = sum(p.stat().st_size for p in graph.feature_files.values()) / MIB
        say(f"feature files: {files:.0f} MiB; opened: {smaps()}")
        results: dict[str, Any] = {"feature_mib": files, "samples_per_worker": args.samples}
        for n in args.workers:
            say(f"{n} forked process(es)")
            results[f"processes_{n}"] = with_processes(graph, n, args.samples)
        for n in args.workers:  # threads last: they touch the parent's own map, which the forks must not inherit
            say(f"{n} thread(s)")
            results[f"threads_{n}"] = with_threads(graph, n, args.samples)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(report(results, tuple(args.workers)))
    return 0


def report(r: dict[str, Any], counts: tuple[int, int]) -> str:
    few, many = counts
    out = [f"rgat graph memory: {r['feature_mib']:.0f} MiB of memory-mapped features, every page read by every "
           f"worker after {r['samples_per_worker']} sampled seeds each (MiB)"]
    out.append(f"{'':28}{'peak RSS':>10}{'RSS':>10}{'PSS':>10}{'USS':>10}{'anon':>10}")
    for n in counts:
        p = r[f"threads_{n}"]["process"]
        out.append(f"{f'{n} thread(s), the process':28}{p['peak_rss']:10.0f}{p['rss']:10.0f}{p['pss']:10.0f}"
                   f"{p['uss']:10.0f}{p['anon']:10.0f}")
    for n in counts:
        ws = r[f"processes_{n}"]["workers"]
        mean = {k: sum(w[k] for w in ws) / len(ws) for k in ("peak_rss", "rss", "pss", "uss", "anon")}
        out.append(f"{f'{n} process(es), per worker':28}{mean['peak_rss']:10.0f}{mean['rss']:10.0f}"
                   f"{mean['pss']:10.0f}{mean['uss']:10.0f}{mean['anon']:10.0f}")
    t1, t4 = r[f"threads_{few}"]["process"], r[f"threads_{many}"]["process"]
    p1 = r[f"processes_{few}"]["workers"]
    p4 = r[f"processes_{many}"]["workers"]
    uss1, uss4 = sum(w["uss"] for w in p1), sum(w["uss"] for w in p4)
    anon1, anon4 = sum(w["anon"] for w in p1), sum(w["anon"] for w in p4)
    pss1, pss4 = sum(w["pss"] for w in p1), sum(w["pss"] for w in p4)
    out.append(f"threads: RSS {many} vs {few}: {t4['rss'] / t1['rss']:.2f}x, anonymous {t4['anon']:.0f} vs "
               f"{t1['anon']:.0f} MiB (a copy per thread would add {(many - few) * r['feature_mib']:.0f} MiB)")
    out.append(f"processes: total USS {many} vs {few}: {uss4:.0f} vs {uss1:.0f} MiB ({uss4 / uss1:.2f}x); total PSS "
               f"{pss4:.0f} vs {pss1:.0f} MiB ({pss4 / pss1:.2f}x); anonymous per worker {anon4 / many:.0f} vs "
               f"{anon1 / few:.0f} MiB (the parent's, shared copy-on-write); a copy would add "
               f"{r['feature_mib']:.0f} MiB of anonymous memory to each worker")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
