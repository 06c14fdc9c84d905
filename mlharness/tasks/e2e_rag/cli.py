"""``mlharness dataset synth e2e-rag`` and ``mlharness accuracy e2e-rag-qna``; the standard library only at import."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.generative_cli import add_synth, print_result, write_synth


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    add_synth(synth, "e2e-rag", "a synthetic FRAMES set and its frozen corpus (e2e-rag-qna, e2e-rag-db layout)",
              "Write frames_dataset.tsv (the FRAMES columns QSL.py and accuracy_eval.py read) and doc_html/ "
              "(docs.tar.gz, url_mapping.json and the pages extracted beside them, named as download_docs.py "
              "names them): two-hop questions whose answer is in the corpus only.",
              "number of questions (default: 8)", cmd_synth)
    a = accuracy.add_parser("e2e-rag-qna", help="retrieval and LLM-judge accuracy of an e2e-rag-qna run "
                                                "(accuracy_eval.py)",
                            description="Rebuild results.json from the run's pipeline_results.jsonl for the samples "
                                        "of its accuracy log, ask the judge about every answer, and print "
                                        "accuracy_eval.py's summary and its accuracy.txt line.")
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json (pipeline_results.jsonl beside it)")
    a.add_argument("--dataset-path", type=Path, required=True, help="frames_dataset.tsv or its folder")
    a.add_argument("--records", type=Path, default=None, help="pipeline_results.jsonl, if not beside the log")
    a.add_argument("--judge-url", default=None, help="an OpenAI-compatible chat completions URL")
    a.add_argument("--judge-model", default=None)
    a.add_argument("--judge-timeout", type=float, default=None, metavar="SECONDS", help="per call (default: 60)")
    a.add_argument("--judge-errors", choices=("raise", "wrong"), default="raise",
                   help="a judge call that fails: exit 3 naming the sample (default), or count the answer wrong "
                        "as accuracy_eval.py does (the summary says how many)")
    a.add_argument("--num-workers", type=int, default=4, help="judge calls at a time (default: 4)")
    a.add_argument("--results-out", type=Path, default=None, help="write the rebuilt results.json here")
    a.set_defaults(func=cmd_accuracy)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.e2e_rag.synth import DEFAULT_COUNT, write_synthetic_frames

    return write_synth(args, console, write_synthetic_frames, DEFAULT_COUNT,
                       " (questions) to {out}/frames_dataset.tsv and their pages to {out}/doc_html/")


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.e2e_rag.metric import score_log

    options: dict[str, Any] = {"judge_errors": args.judge_errors, "num_workers": args.num_workers}
    for key, value in (("judge_url", args.judge_url), ("judge_model", args.judge_model),
                       ("judge_timeout_s", args.judge_timeout)):
        if value is not None:
            options[key] = value
    return print_result(score_log(args.log, args.dataset_path, options, args.records, args.results_out))
