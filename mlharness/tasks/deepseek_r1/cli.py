"""``mlharness dataset synth deepseek-r1`` and ``mlharness accuracy deepseek-r1``.

Kept light: pandas, transformers and sympy are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import TaskCommands, opt
from mlharness.tasks.generative_cli import (
    code_limits,
    code_options,
    print_result,
    token_accuracy,
    token_synth,
    write_synth,
)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.deepseek_r1.synth import DEFAULT_COUNT, write_synthetic_deepseek

    return write_synth(args, console, write_synthetic_deepseek, DEFAULT_COUNT,
                       " to {out} (mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl, tokenizer/)")


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.deepseek_r1.metric import score_log

    return print_result(score_log(args.log, args.dataset_file, args.tokenizer, args.dtype, args.lcb_tests,
                                  code_limits(args)))


COMMANDS = TaskCommands(
    synth=[token_synth("deepseek-r1", "a synthetic deepseek-r1 set (mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl)",
                       "Write the deepseek-r1 dataset pickle in the official layout (dataset, question, text_input, "
                       "tok_input, ground_truth, ...) with questions of the five kinds (GPQA, MMLU-Pro, MATH500, "
                       "AIME, LiveCodeBench with tests) and the tokenizer that made tok_input in tokenizer/; "
                       "deepseek-r1-oracle scores 100 on it.", cmd_synth,
                       "number of samples (default: 20; kinds in turn)")],
    accuracy=[token_accuracy("deepseek-r1", "exact_match of a deepseek-r1 accuracy log (eval_accuracy.py)",
                             "Score an mlperf_log_accuracy.json of int32 token ids against the dataset pickle as "
                             "the official language/deepseek-r1/eval_accuracy.py does (LiveCodeBench programs run "
                             "in the sandbox) and print its result (accuracy.txt).", cmd_accuracy,
                             opt("--dataset-file", type=Path, required=True, help="the dataset pickle"),
                             options=code_options("a dataset"))],
)
register = COMMANDS.register
