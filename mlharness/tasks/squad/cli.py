"""``mlharness dataset synth squad`` and ``mlharness accuracy squad``.

Kept light: numpy, transformers and onnx are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import TaskCommands, accuracy, opt, synth

DTYPE_CHOICES = ("int8", "int16", "int32", "int64", "float16", "float32", "float64")


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


COMMANDS = TaskCommands(
    synth=[synth("squad", "a synthetic SQuAD v1.1 dev set (dev-v1.1.json + vocab.txt)",
                 "Write a synthetic dev-v1.1.json and vocab.txt in the official formats; the bert-oracle model "
                 "scores exactly EM = F1 = 100 on it.", cmd_synth, count=None,
                 count_help="number of questions (default: 48)")],
    accuracy=[accuracy("squad", "SQuAD v1.1 EM/F1 of a BERT accuracy log (accuracy-squad.py)",
                       "Post-process an mlperf_log_accuracy.json of BERT logits as the MLPerf reference does and "
                       "print the official v1.1 evaluation's line (every question scored); a log lacking some "
                       "features adds a line labelled 'subset of N of M questions, not comparable'.", cmd_accuracy,
                       options=[
        opt("--val-data", type=Path, required=True, help="dev-v1.1.json"),
        opt("--vocab", type=Path, required=True, help="the model's vocab.txt"),
        opt("--dtype", default="float32", choices=DTYPE_CHOICES, help="response dtype (default: float32)"),
        opt("--output-transposed", action="store_true", help="responses hold all starts, then all ends"),
        opt("--out-file", type=Path, default=None, help="predictions.json to write (default: beside the log)"),
        opt("--tokenizer", default="slow", choices=("slow", "fast")),
        opt("--force", action="store_true", help="replace an existing --out-file")])],
)
register = COMMANDS.register
