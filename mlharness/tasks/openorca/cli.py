"""``mlharness dataset synth openorca`` and ``mlharness accuracy openorca``.

Kept light: pandas, transformers, nltk and rouge-score are imported inside the handlers so ``mlharness --help``
stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import TaskCommands, opt
from mlharness.tasks.generative_cli import print_result, token_accuracy, token_synth, write_synth


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.openorca.dataset import DATASET_FILE
    from mlharness.tasks.openorca.synth import DEFAULT_COUNT, write_synthetic_openorca

    return write_synth(args, console, write_synthetic_openorca, DEFAULT_COUNT,
                       f" to {{out}} ({DATASET_FILE}, tokenizer/)", tokenizer=args.tokenizer)


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.openorca.metric import score_log

    return print_result(score_log(args.log, args.dataset_file, args.tokenizer, args.dtype))


COMMANDS = TaskCommands(
    synth=[token_synth("openorca", "a synthetic llama2-70b set (open_orca_gpt4_tokenized_llama pickle)",
                       "Write open_orca_gpt4_tokenized_llama.sampled_24576.pkl in the official layout (a pandas "
                       "DataFrame: id, system_prompt, question, output, input, tok_input, tok_output, origin, "
                       "tok_input_length, tok_output_length) with the tokenizer that made the token columns in "
                       "tokenizer/; the llama2-70b-99.9-oracle model scores ROUGE 100 on it.", cmd_synth,
                       "number of samples (default: 64)", tokenizer_help="a checkpoint folder whose tokenizer "
                       "encodes the prompts and answers (default: the tiny Llama 2 shaped tokenizer of "
                       "llama2-70b-99.9-random, trained locally)")],
    accuracy=[token_accuracy("openorca", "ROUGE of a llama2-70b accuracy log (evaluate-accuracy.py)",
                             "Score an mlperf_log_accuracy.json of int32 token ids against the OpenOrca pickle as "
                             "the official language/llama2-70b/evaluate-accuracy.py does, offline, and print its "
                             "result (the content of accuracy.txt).", cmd_accuracy,
                             opt("--dataset-file", type=Path, required=True,
                                 help="open_orca_gpt4_tokenized_llama.sampled_24576.pkl"))],
)
register = COMMANDS.register
