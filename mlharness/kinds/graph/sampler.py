"""Neighbourhood sampling of a heterogeneous graph in plain torch: no pyg-lib, torch-sparse or DGL.

It samples the way the R-GAT reference's ``PyGSampler`` mimics PyG and GraphLearn-for-PyTorch
(``graph/R-GAT/dgl_utilities/pyg_sampler.py``): the fan-outs are listed per layer, input layer first, and sampled
from the seeds outwards in reverse (``[5, 10, 15]``: 15 in-neighbours of each seed per edge type, then 10 of each
node found, then 5); a node already sampled is not sampled again; every edge sampled at any hop is kept, so each
layer of the model sees the whole subgraph (PyG's semantics, which the sampler of the reference reproduces).

Where the reference samples a batch jointly with DGL's global random state, each seed here is sampled alone, from a
generator seeded by the run's ``seed`` and the seed node's id, and a batch is the disjoint union of its seeds'
subgraphs. A node's answer is then the same whatever batch it falls in and whichever run asks for it, which is what
TEST01 compares (the performance run's answers against the accuracy run's) and what makes two accuracy runs
agree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

EdgeType = tuple[str, str, str]
_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant (golden ratio): spreads (seed, node) over the generator's seeds


@dataclass
class Csc:
    """One edge type's incoming edges by destination: the sources of node ``d`` are
    ``indices[indptr[d]:indptr[d + 1]]``."""

    indptr: Any  # torch int64 [n_dst + 1]
    indices: Any  # torch int64 [n_edges]


def node_generator(seed: int, node: int) -> Any:
    """The generator one seed node's neighbourhood is drawn from: fixed by the run's seed and the node's id."""
    import torch

    g = torch.Generator()
    g.manual_seed((seed * _MIX + node) % (1 << 63))
    return g


def sample_neighbours(csc: Csc, dst: Any, fanout: int, generator: Any) -> tuple[Any, Any]:
    """At most ``fanout`` in-neighbours of each node of ``dst``, without replacement (all of them when it has
    fewer). Returns (sources, destinations) of the sampled edges as global ids."""
    import torch

    deg = csc.indptr[dst + 1] - csc.indptr[dst]
    total = int(deg.sum())
    if total == 0:
        empty = torch.empty(0, dtype=torch.int64)
        return empty, empty
    segment = torch.repeat_interleave(torch.arange(len(dst)), deg)
    first = torch.repeat_interleave(torch.cumsum(deg, 0) - deg, deg)  # each edge's segment start, in the flat list
    position = torch.repeat_interleave(csc.indptr[dst], deg) + (torch.arange(total) - first)
    # a random order within each segment: sort by (segment, random key); segments stay contiguous and in place
    keys = segment.to(torch.float64) + torch.rand(total, generator=generator, dtype=torch.float64)
    order = torch.argsort(keys)
    keep = (torch.arange(total) - first) < fanout
    chosen = position[order][keep]
    return csc.indices[chosen], dst[segment[order][keep]]


class Subgraph:
    """One seed's sampled neighbourhood, in global ids: the nodes of each type (the seed first) and the edges."""

    def __init__(self, seed_type: str, seed: int):
        import torch

        self.nodes: dict[str, Any] = {seed_type: torch.tensor([seed], dtype=torch.int64)}
        self.edges: dict[EdgeType, list[tuple[Any, Any]]] = {}
        self._sorted: dict[str, tuple[int, Any, Any]] = {}  # ntype: (node count, argsort, sorted ids)

    def local(self, ntype: str, ids: Any) -> Any:
        """Positions of global ``ids`` in this subgraph's list of ``ntype`` nodes. The sort of a type's nodes is
        made once and kept (every edge type with that type at either end asks again); nodes are only ever
        appended, so their count tells whether it is still the list's."""
        import torch

        known = self.nodes[ntype]
        cached = self._sorted.get(ntype)
        if cached is None or cached[0] != len(known):
            order = torch.argsort(known)
            cached = self._sorted[ntype] = (len(known), order, known[order])
        return cached[1][torch.searchsorted(cached[2], ids)]


def sample_one(graph: dict[EdgeType, Csc], seed_type: str, node: int, fanouts: list[int], seed: int,
               etypes: tuple[EdgeType, ...] | None = None) -> Subgraph:
    """The neighbourhood of one seed node: hop by hop, from the last fan-out to the first. ``etypes``: the edge
    types in sorted order, when the caller keeps them (a graph opened once does); sorted here otherwise."""
    import torch

    g = node_generator(seed, node)
    sub = Subgraph(seed_type, node)
    frontier = dict(sub.nodes)
    order = tuple(sorted(graph)) if etypes is None else etypes  # the draws' order: it fixes each edge type's draws
    for fanout in reversed(fanouts):
        found: dict[str, list[Any]] = {}
        for etype in order:
            src_type, _, dst_type = etype
            if dst_type not in frontier or not len(frontier[dst_type]):
                continue
            src, dst = sample_neighbours(graph[etype], frontier[dst_type], fanout, g)
            if len(src):
                sub.edges.setdefault(etype, []).append((src, dst))
                found.setdefault(src_type, []).append(src)
        frontier = {}
        for ntype, parts in found.items():
            new = torch.unique(torch.cat(parts))
            known = sub.nodes.get(ntype)
            if known is not None:
                new = new[~torch.isin(new, known)]
            if len(new):
                sub.nodes[ntype] = new if known is None else torch.cat([known, new])
                frontier[ntype] = new
    return sub


def batch_arrays(subgraphs: list[Subgraph], ntypes: list[str], etypes: list[EdgeType],
                 features: dict[str, Any]) -> list[np.ndarray]:
    """A batch of seeds' subgraphs as the model's inputs, their disjoint union: for each node type (``ntypes``'
    order) its features [nodes, dim] (the seeds are the first rows of the seed type, in the batch's order), then for
    each edge type (``etypes``' order) its edge_index [2, edges] in batch-local ids (row 0 the sources), then the
    seeds' global ids [batch]."""
    import torch

    offset = dict.fromkeys(ntypes, 0)
    ids: dict[str, list[Any]] = {t: [] for t in ntypes}
    edges: dict[EdgeType, list[Any]] = {e: [] for e in etypes}
    seeds = []
    for sub in subgraphs:
        for etype, parts in sub.edges.items():
            src_type, _, dst_type = etype
            src = torch.cat([p[0] for p in parts])
            dst = torch.cat([p[1] for p in parts])
            pair = torch.stack([sub.local(src_type, src) + offset[src_type], sub.local(dst_type, dst) + offset[dst_type]])
            edges[etype].append(torch.unique(pair, dim=1))  # an edge sampled at two hops is one edge
        for ntype, nodes in sub.nodes.items():
            ids[ntype].append(nodes)
            offset[ntype] += len(nodes)
        seeds.append(int(sub.nodes[next(iter(sub.nodes))][0]))
    # the seeds first among their type's rows: each subgraph lists its seed first, so move those rows up front
    out: list[np.ndarray] = []
    remap: dict[str, Any] = {}
    for ntype in ntypes:
        parts = ids[ntype]
        glob = torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)
        order = _seeds_first(parts) if ntype == _seed_type(subgraphs) else torch.arange(len(glob))
        remap[ntype] = torch.empty_like(order)
        remap[ntype][order] = torch.arange(len(order))
        table = features[ntype]
        rows = glob[order].numpy()
        out.append(np.ascontiguousarray(table[rows]) if len(rows) else np.zeros((0, table.shape[1]), table.dtype))
    for etype in etypes:
        src_type, _, dst_type = etype
        if edges[etype]:
            pair = torch.cat(edges[etype], dim=1)
            pair = torch.stack([remap[src_type][pair[0]], remap[dst_type][pair[1]]])
        else:
            pair = torch.empty((2, 0), dtype=torch.int64)
        out.append(pair.numpy())
    out.append(np.asarray(seeds, dtype=np.int64))
    return out


def _seed_type(subgraphs: list[Subgraph]) -> str | None:
    return next(iter(subgraphs[0].nodes)) if subgraphs else None


def _seeds_first(parts: list[Any]) -> Any:
    """Row order putting each subgraph's first node (its seed) before every other node."""
    import torch

    starts, at = [], 0
    for p in parts:
        starts.append(at)
        at += len(p)
    head = torch.tensor(starts, dtype=torch.int64)
    rest = torch.ones(at, dtype=torch.bool)
    rest[head] = False
    return torch.cat([head, torch.nonzero(rest).flatten()])
