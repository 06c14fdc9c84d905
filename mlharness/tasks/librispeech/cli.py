"""``mlharness dataset synth librispeech`` and ``mlharness accuracy librispeech``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    p = synth.add_parser("librispeech", help="a synthetic whisper set (dev-all-repack.json + 16 kHz WAV clips)",
                         description="Write dev-all-repack.json and dev-all-repack/*.wav in the layout of the "
                                     "whisper reference's download_dataset.sh: speech by espeak-ng where it is "
                                     "installed, else tones; transcripts from a word list.")
    p.add_argument("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)")
    p.add_argument("--count", type=int, default=None, help="number of clips (default: 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tones", action="store_true", help="tones instead of espeak-ng speech")
    p.add_argument("--force", action="store_true", help="write into a folder that already has files")
    p.set_defaults(func=cmd_synth)

    a = accuracy.add_parser("librispeech", help="WER of a whisper accuracy log (accuracy_eval.py)",
                            description="Score an mlperf_log_accuracy.json of label indices against "
                                        "dev-all-repack.json as speech2text/accuracy_eval.py does and print its "
                                        "line (the content of accuracy.txt).")
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json")
    a.add_argument("--manifest", type=Path, required=True, help="dev-all-repack.json")
    a.add_argument("--dataset-dir", type=Path, default=None,
                   help="the folder the clips' names are relative to (default: the manifest's folder)")
    a.add_argument("--dtype", default=None, choices=("int8", "int16", "int32", "int64"),
                   help="width of the label indices (default: the response element type recorded in the "
                        "mlharness_run.json beside the log, else inferred from the log; the reference SUT and the "
                        "whisper manifests write int64)")
    a.set_defaults(func=cmd_accuracy)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.librispeech.synth import DEFAULT_COUNT, write_synthetic_librispeech
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    count = args.count if args.count is not None else DEFAULT_COUNT
    out = write_synthetic_librispeech(args.out, count=count, seed=args.seed, use_espeak=False if args.tones else None)
    from mlharness.errors import DatasetError
    from mlharness.fileguard import read_text_bounded
    from mlharness.tasks.librispeech.synth import SYNTH_INFO

    # the one-line record write_synthetic_librispeech has just written
    speech = read_text_bounded(out / SYNTH_INFO, "synthetic LibriSpeech record", 1 << 20, error=DatasetError)
    console.print(f"wrote {count} clips to {out} (dev-all-repack.json, dev-all-repack/): {speech}",
                  highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.librispeech.dtype import resolve_dtype
    from mlharness.tasks.librispeech.metric import score_log

    dtype, source = resolve_dtype(args.log, args.dtype)
    if not args.dtype:
        print(f"label indices read as {dtype}: {source}", file=sys.stderr)
    result = score_log(args.log, args.manifest, dtype, args.dataset_dir)
    sys.stdout.write(result.text)
    sys.stdout.flush()
    return 0
