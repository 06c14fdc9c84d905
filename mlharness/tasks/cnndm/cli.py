"""``mlharness dataset synth cnndm`` and ``mlharness accuracy cnndm``.

Kept light: transformers, nltk and rouge-score are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import TaskCommands, opt
from mlharness.tasks.generative_cli import print_result, token_accuracy, token_synth, write_synth


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.cnndm.synth import DEFAULT_COUNT, write_synthetic_cnndm

    return write_synth(args, console, write_synthetic_cnndm, DEFAULT_COUNT,
                       " to {out} (cnn_eval.json, sample_cnn_eval_5000.json, tokenizer/)", tokenizer=args.tokenizer)


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.cnndm.metric import score_log

    return print_result(score_log(args.log, args.dataset_file, args.tokenizer, args.dtype))


COMMANDS = TaskCommands(
    synth=[token_synth("cnndm", "a synthetic llama3.1-8b set (cnn_eval.json, sample_cnn_eval_5000.json)",
                       "Write cnn_eval.json and sample_cnn_eval_5000.json in the official layout (instruction, "
                       "input, tok_input, output) with the tokenizer that made tok_input in tokenizer/; the "
                       "llama3.1-8b-oracle model scores ROUGE 100 on it.", cmd_synth, "number of samples (default: 64)",
                       tokenizer_help="a checkpoint folder whose tokenizer encodes the prompts (default: the tiny "
                       "tokenizer of llama3.1-8b-random, trained locally)")],
    accuracy=[token_accuracy("cnndm", "ROUGE of a llama3.1-8b accuracy log (evaluation.py)",
                             "Score an mlperf_log_accuracy.json of int32 token ids against cnn_eval.json as the "
                             "official language/llama3.1-8b/evaluation.py does, offline, and print its result (the "
                             "content of accuracy.txt).", cmd_accuracy,
                             opt("--dataset-file", type=Path, required=True,
                                 help="cnn_eval.json (or sample_cnn_eval_5000.json)"))],
)
register = COMMANDS.register
