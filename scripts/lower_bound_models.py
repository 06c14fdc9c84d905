#!/usr/bin/env python3
"""`mlharness analyze lower-bound` on ResNet-50 v1.5 and BERT-base, both with random weights: their sequential,
parallel and fused lower bounds beside the measured latency, and the top advice of each.

ResNet-50 is the generator of the resnet50-random manifest; BERT-base is transformers' BertForQuestionAnswering
with BertConfig's defaults (12 layers, hidden 768), exported to ONNX at batch 1 and the given sequence length.
The layer timings go into the given results root's evaluation database, so a second call measures nothing again.

    .venv/bin/python scripts/lower_bound_models.py --work /tmp/lb               # both, 20 profiled runs
    .venv/bin/python scripts/lower_bound_models.py --work /tmp/lb --only bert --seq 128 --runs 10
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def bert_base(path: Path, seq: int) -> Path:
    if path.is_file():
        return path
    import torch
    from transformers import BertConfig, BertForQuestionAnswering

    torch.manual_seed(0)
    model = BertForQuestionAnswering(BertConfig()).eval()

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.start_logits, out.end_logits

    ids = torch.ones(1, seq, dtype=torch.int64)
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[0, seq // 2:] = 0  # a padded sample: the tracer keeps the mask
    with torch.no_grad():
        torch.onnx.export(Wrapper(), (ids, mask, torch.zeros_like(ids)), str(path), opset_version=17, dynamo=False,
                          input_names=["input_ids", "input_mask", "segment_ids"],
                          output_names=["output_start_logits", "output_end_logits"])
    return path


def resnet50(work: Path) -> Path:
    from mlharness.tasks.imagenet.models import ensure_random_resnet50

    return Path(ensure_random_resnet50(work / "resnet50_v1.5_random.onnx"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="models, the results root and the reports")
    ap.add_argument("--only", choices=("resnet50", "bert"), default=None)
    ap.add_argument("--seq", type=int, default=384, help="BERT's sequence length")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    from mlharness.measurement.lowerbound import LowerBoundConfig, analyze
    from mlharness.measurement.lowerbound_report import write
    from mlharness.results_db.db import sqlite_url

    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "results").mkdir(exist_ok=True)
    models = {"resnet50": lambda: resnet50(args.work),
              "bert": lambda: bert_base(args.work / f"bert_base_random_{args.seq}.onnx", args.seq)}
    out = {}
    for name, make in models.items():
        if args.only and name != args.only:
            continue
        path = make()
        t0 = time.perf_counter()
        r = analyze(LowerBoundConfig(model=path, db=sqlite_url(args.work / "results"), runs=args.runs,
                                     threads=args.threads, progress=lambda text: print(f"  {text}", flush=True)))
        folder = args.work / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
        write(r, folder)
        b, m, a = r["bounds_s"], r["measured_s"], r["advice"]
        out[name] = {"seconds": round(time.perf_counter() - t0, 1), "nodes": r["nodes"],
                     "configurations": r["configurations"], "from_db": r["configurations_from_db"],
                     "sequential_ms": b["sequential"] * 1e3, "parallel_ms": b["parallel"] * 1e3,
                     "fused_ms": b["fused"] * 1e3, "measured_unoptimised_ms": m["unoptimised"] * 1e3,
                     "measured_optimised_ms": m["optimised"] * 1e3,
                     "measured_over_sequential": m["unoptimised"] / b["sequential"] if b["sequential"] else None,
                     "top_layers": [(x["node"], x["op"], round(x["excess_s"] * 1e3, 3), x["share_of_gap"])
                                    for x in a["layers"][:3]],
                     "top_operators": [(x["op"], x["nodes"], round(x["excess_s"] * 1e3, 3), x["share_of_gap"])
                                       for x in a["operators"][:3]],
                     "overhead": a["framework_overhead"], "report": str(folder)}
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
