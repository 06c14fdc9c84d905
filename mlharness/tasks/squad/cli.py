"""``mlharness dataset synth squad`` and ``mlharness accuracy squad``.

Kept light: numpy, transformers and onnx are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DTYPE_CHOICES = ("int8", "int16", "int32", "int64", "float16", "float32", "float64")


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    p = synth.add_parser("squad", help="a synthetic SQuAD v1.1 dev set (dev-v1.1.json + vocab.txt)",
                         description="Write a synthetic dev-v1.1.json and vocab.txt in the official formats; the "
                                     "bert-oracle model scores exactly EM = F1 = 100 on it.")
    p.add_argument("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)")
    p.add_argument("--count", type=int, default=None, help="number of questions (default: 48)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="write into a folder that already has files")
    p.set_defaults(func=cmd_synth)

    a = accuracy.add_parser("squad", help="SQuAD v1.1 EM/F1 of a BERT accuracy log (accuracy-squad.py)",
                            description="Post-process an mlperf_log_accuracy.json of BERT logits as the MLPerf "
                                        "reference does and print the official v1.1 evaluation's line (every "
                                        "question scored); a log lacking some features adds a line labelled "
                                        "'subset of N of M questions, not comparable'.")
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json")
    a.add_argument("--val-data", type=Path, required=True, help="dev-v1.1.json")
    a.add_argument("--vocab", type=Path, required=True, help="the model's vocab.txt")
    a.add_argument("--dtype", default="float32", choices=DTYPE_CHOICES, help="response dtype (default: float32)")
    a.add_argument("--output-transposed", action="store_true", help="responses hold all starts, then all ends")
    a.add_argument("--out-file", type=Path, default=None, help="predictions.json to write (default: beside the "
                   "log)")
    a.add_argument("--tokenizer", default="slow", choices=("slow", "fast"))
    a.add_argument("--force", action="store_true", help="replace an existing --out-file")
    a.set_defaults(func=cmd_accuracy)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.squad.synth import DEFAULT_COUNT, synthetic_squad, write_synthetic_squad
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    count = args.count if args.count is not None else DEFAULT_COUNT
    out = write_synthetic_squad(args.out, count=count, seed=args.seed)
    data = synthetic_squad(count, args.seed)["data"]
    paragraphs = sum(len(article["paragraphs"]) for article in data)
    console.print(f"wrote {count} questions over {paragraphs} contexts to {out} (dev-v1.1.json, vocab.txt)",
                  highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.squad.metric import score_accuracy_log
    from mlharness.userfiles import check_free

    if args.out_file is not None:  # the default, beside the log, is in the run's own folder
        check_free(args.out_file, args.force)
    out_file = args.out_file if args.out_file is not None else args.log.parent / "predictions.json"
    result = score_accuracy_log(args.log, args.val_data, args.vocab, out_file, dtype=args.dtype,
                                transposed=args.output_transposed, tokenizer=args.tokenizer)
    sys.stdout.write(result.text)  # exactly what accuracy.txt holds, as the official script prints it
    sys.stdout.flush()
    return 0
