"""R-GAT in PyTorch Geometric, as the reference's ``rgnn.py`` builds it (``HeteroConv`` of ``GATConv`` per edge type,
heads concatenated, leaky ReLU between layers, a linear classifier over the paper nodes), and an oracle with the
same inputs. Both take the inputs a graph input gives (``kinds/graph/sampler.py``'s ``batch_arrays``): the
features of each node type, the edge_index of each edge type (both in sorted name order), then the seed ids."""

from __future__ import annotations

from typing import Any

NTYPES = sorted(["paper", "author", "institute", "fos", "journal", "conference"])
FILE_ETYPES = [("paper", "cites", "paper"), ("paper", "written_by", "author"),
               ("author", "affiliated_to", "institute"), ("paper", "topic", "fos"),
               ("paper", "published", "journal"), ("paper", "venue", "conference")]
# the reference's eleven edge types: the six on disk and the reverse of the five between two node types
ETYPES = sorted(FILE_ETYPES + [(d, f"rev_{r}", s) for s, r, d in FILE_ETYPES if s != d])


def _split(arrays: tuple[Any, ...]) -> tuple[dict[str, Any], dict[tuple[str, str, str], Any], Any]:
    import torch

    if len(arrays) != len(NTYPES) + len(ETYPES) + 1:
        raise ValueError(f"R-GAT takes {len(NTYPES)} feature tables, {len(ETYPES)} edge indexes and the seeds "
                         f"({len(NTYPES) + len(ETYPES) + 1} inputs), got {len(arrays)}: is the input type 'graph' "
                         "over an IGBH folder?")
    x = {t: a.to(torch.float32) for t, a in zip(NTYPES, arrays[: len(NTYPES)], strict=True)}
    edges = dict(zip(ETYPES, arrays[len(NTYPES):-1], strict=True))
    return x, edges, arrays[-1]


def rgat(in_dim: int = 1024, h_dim: int = 512, num_classes: int = 2983, num_layers: int = 3, heads: int = 4,
         seed: int | None = None) -> Any:
    """The R-GAT of the reference (in 1024, hidden 512, 2983 classes, 3 layers, 4 heads); ``seed`` fixes random
    weights (rgat-random)."""
    import torch
    from torch_geometric.nn import GATConv, HeteroConv

    if seed is not None:
        torch.manual_seed(seed)

    class RGAT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = torch.nn.ModuleList(
                HeteroConv({e: GATConv(in_dim if i == 0 else h_dim, h_dim // heads, heads=heads,
                                       add_self_loops=False) for e in ETYPES})
                for i in range(num_layers))
            self.lin = torch.nn.Linear(h_dim, num_classes)

        def forward(self, *arrays: Any) -> Any:
            x, edges, seeds = _split(arrays)
            for ntype, table in x.items():
                if table.shape[-1] != in_dim:  # else a bare matmul error deep in GATConv
                    from mlharness.errors import DatasetError

                    raise DatasetError(
                        f"the graph's '{ntype}' node features ({ntype}/node_feat.npy in the graph input's folder) "
                        f"have {table.shape[-1]} features per node; this R-GAT's first layer expects {in_dim} "
                        "(factory_args.in_dim; IGBH's are 1024): give the graph this model was built for")
            for i, conv in enumerate(self.convs):
                x = conv(x, edges)
                if i != len(self.convs) - 1:  # dropout is the identity in eval mode
                    x = {k: torch.nn.functional.leaky_relu(v) for k, v in x.items()}
            return self.lin(x["paper"][: len(seeds)])

    return RGAT()


def oracle(num_classes: int = 19) -> Any:
    """Answers each seed's label, which ``mlharness dataset synth rgat`` writes into the first feature of every
    paper: exact when the seeds come first among the batch's paper rows, in the batch's order, with their own
    features (a wrong gather, seed order or validation split scores far less)."""
    import torch

    class Oracle(torch.nn.Module):
        def forward(self, *arrays: Any) -> Any:
            x, _, seeds = _split(arrays)
            label = x["paper"][: len(seeds), 0].round().long().clamp(0, num_classes - 1)
            return torch.nn.functional.one_hot(label, num_classes).to(torch.float32)

    return Oracle()
