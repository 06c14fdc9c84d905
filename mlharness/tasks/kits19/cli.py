"""``mlharness dataset synth|prepare kits19`` and ``mlharness accuracy kits19``.

Light on purpose: numpy, scipy and nibabel are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.markup import escape

from mlharness.tasks.commands import FORCE, TaskCommands, accuracy, one_of, opt, prepare, synth


def _synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.kits19 import synth as kits19_synth
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    cases = kits19_synth.write_dataset(args.out, args.count, args.seed)
    console.print(f"wrote {len(cases)} synthetic KiTS19 cases to {escape(str(args.out))}", highlight=False)
    return 0


def _prepare(args: argparse.Namespace, console: Any) -> int:
    from mlharness.errors import DatasetError
    from mlharness.tasks.kits19 import dataset as kits19
    from mlharness.tasks.kits19.prepared import PreparedKits19
    from mlharness.userfiles import check_free

    if args.workers < 1:
        raise DatasetError(f"--workers must be >= 1, got {args.workers}")
    check_free(args.out, args.force)
    cases = None
    if args.official:
        cases = list(kits19.INFERENCE_CASES)
    elif args.cases is not None:
        cases = kits19.read_case_list(args.cases)
    out = kits19.prepare(args.raw, args.out, cases, workers=args.workers, image_nifti=args.image_nifti)
    data = PreparedKits19.load(out)
    shapes = sorted({tuple(data.entry(c)["image_shape"]) for c in data.cases})
    console.print(f"pre-processed {len(data)} cases into {escape(str(out))}; shapes: "
                  f"{', '.join('x'.join(map(str, s)) for s in shapes)}", highlight=False)
    return 0


def _accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.kits19.metric import score_log

    options: dict[str, Any] = {"dtype": args.dtype, "save_predictions": not args.no_save_predictions}
    if args.output_dir is not None:  # the default, beside the log, is in the run's own folder
        from mlharness.tasks.kits19.metric import CSV_FILE
        from mlharness.userfiles import check_free

        check_free(args.output_dir / CSV_FILE, args.force)
        options["output_dir"] = str(args.output_dir)
    result = score_log(args.log, args.preprocessed_dir, args.count, options)
    console.print(result.text, end="", markup=False, highlight=False, soft_wrap=True)
    return 0


COMMANDS = TaskCommands(
    synth=[synth("kits19", "write synthetic CT cases in the KiTS19 layout (NIfTI)",
                 "Write CT-like cases (case_XXXXX/imaging.nii.gz, segmentation.nii.gz) with kidneys and a tumor; "
                 "the 3d-unet-oracle model segments them almost perfectly.", _synth, count=4,
                 count_help="number of cases (default 4)", out_help="folder to write (a KiTS19 'data' folder)")],
    prepare=[prepare("kits19", "pre-process KiTS19 as the MLPerf 3D U-Net reference does",
                     "Resample to 1.6 x 1.2 x 1.2 mm, clip and normalise, pad and crop for the 128^3 sliding "
                     "window; write the volumes, the ground truth and checksums.", _prepare, options=[
        opt("--raw", type=Path, required=True, help="KiTS19 'data' folder with case_XXXXX/ sub-folders"),
        opt("--out", type=Path, required=True, help="folder for the pre-processed dataset"),
        opt("--workers", type=int, default=min(4, os.cpu_count() or 1), help="processes (default: up to 4)"),
        one_of(opt("--cases", type=Path, default=None, help="case list: a JSON list (the reference's "
                   "meta/inference_cases.json) or one id per line; default: every case found"),
               opt("--official", action="store_true", help="the 43 MLPerf inference cases (case_00400 is read "
                   "from case_00185 when absent, as the reference's Makefile copies it)")),
        opt("--image-nifti", action="store_true", help="also write nifti/<case>/imaging.nii.gz"),
        FORCE])],
    accuracy=[accuracy("kits19", "mean DICE (kidney, tumor) from a 3D U-Net accuracy log",
                       "Score mlperf_log_accuracy.json like the reference's accuracy_kits.py and print what "
                       "accuracy.txt holds: the official line when the log holds every case, a line labelled "
                       "'subset of N of M cases, not comparable' otherwise.", _accuracy, options=[
        opt("--preprocessed-dir", type=Path, required=True, help="the folder 'dataset prepare' or the reference's "
            "preprocess.py wrote"),
        opt("--count", type=int, default=None, help="the log is of a run over the first N cases: each must be "
            "there once (default: any cases; fewer than all are scored as a labelled subset)"),
        opt("--dtype", default="uint8", help="response dtype (default uint8)"),
        opt("--output-dir", type=Path, default=None, help="where predictions and the CSV go (default: beside the "
            "log)"),
        opt("--no-save-predictions", action="store_true", help="skip writing prediction NIfTI files"),
        opt("--force", action="store_true", help="replace the CSV in an existing --output-dir")])],
)
register = COMMANDS.register
