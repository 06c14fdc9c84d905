"""One door for files: no module of the package opens or reads a file by its path except through
``mlharness/fileguard.py``, which refuses FIFOs, devices and folders, opens non-blocking and bounds every read.

A new reader written beside the door (``open``, ``Path.read_text``, ``np.load``, ``torch.load``, ``Image.open``,
``pd.read_*``, ``json.load`` on a file, ...) fails :func:`test_no_reader_bypasses_the_door`. The few calls that
need no door are listed in :data:`ALLOWED`, each with why it is safe."""

from __future__ import annotations

import textwrap
from pathlib import Path

from door_scan import scan

import mlharness

PACKAGE = Path(mlharness.__file__).parent

# (module, enclosing function) -> why the reads there need no door
ALLOWED: dict[tuple[str, str], str] = {
    ("mlharness/telemetry/sampler.py", "_Host._proc_stat"):
        "/proc/stat, a fixed kernel file read each sampling tick; no user names it",
    ("mlharness/telemetry/sampler.py", "_Host._rss_bytes"):
        "/proc/self/statm, a fixed kernel file read each sampling tick; no user names it",
    ("mlharness/tasks/deepseek_r1/code_runner.py", "main"):
        "the sandboxed child's own standard input and /dev/null, fixed descriptors, not a user's path",
    ("mlharness/tasks/deepseek_r1/isolation.py", "processes_of"):
        "/proc/<pid>/status of the sandbox's own processes; no user names it",
    ("mlharness/cluster/ray_tasks.py", "raylet_gone"):
        "/proc/<pid>/stat of the node's raylet, a kernel file of a pid Ray gave; no user names it",
    ("mlharness/manifest/archives.py", "_extract_zip"):
        "a member of an archive already opened through the door (zf.open(info)), and O_EXCL writes",
    ("mlharness/tasks/deepseek_r1/sandbox.py", "_runner_source"):
        "code_runner.py, the sandbox's program shipped beside the module (RUNNER), not a path a user names",
    ("mlharness/tasks/bfcl_v4/checker.py", "main"):
        "runs in bfcl-eval's own environment, where mlharness cannot be imported; reads the job file mlharness wrote",
    ("mlharness/tasks/wan22/vbench_child.py", "main"):
        "runs in VBench's own environment, where mlharness cannot be imported; reads the job file mlharness wrote",
    ("mlharness/tasks/wan22/vbench_child.py", "run_vbench"):
        "VBench's answer in the temporary folder mlharness made for it, read in VBench's own environment",
    ("mlharness/tasks/imagenet/preprocess.py", "read_bgr"):
        "cv2.imread takes only a path: called after fileguard.check_regular_file on that path",
    ("mlharness/tasks/openimages/preprocess.py", "read_bgr"):
        "cv2.imread takes only a path: called after fileguard.check_regular_file on that path",
    ("mlharness/results_db/db.py", "exclusive"):
        "opens the database's folder (O_DIRECTORY) only to flock it; nothing is read",
    ("mlharness/submission/system.py", "template_text"):
        "system-template.yaml shipped beside the module (SYSTEM_TEMPLATE), not a path a user names",
    ("mlharness/loadgen/settings.py", "embedded_mlperf_conf"):
        "the installed LoadGen extension module's own file (mlperf_loadgen.__file__), not a user's path",
}


def test_no_reader_bypasses_the_door() -> None:
    bypassing = [hit for hit in scan(PACKAGE) if (hit.path, hit.function) not in ALLOWED]
    assert not bypassing, ("files read by path outside mlharness/fileguard.py (use its readers, or add the "
                           "function to ALLOWED with why it is safe):\n" + "\n".join(map(str, bypassing)))


def test_allow_list_names_only_functions_that_still_read() -> None:
    found = {(hit.path, hit.function) for hit in scan(PACKAGE)}
    stale = sorted(key for key in ALLOWED if key not in found)
    assert not stale, f"ALLOWED names functions that no longer read a file by path: {stale}"


def test_scan_finds_a_planted_reader(tmp_path: Path) -> None:
    """The scan is what enforces the door: each way of reading a path past it is caught, writes are not."""
    package = tmp_path / "pkg"
    (package / "kind").mkdir(parents=True)
    (package / "fileguard.py").write_text("def read(p):\n    return open(p).read()\n")  # the door itself
    (package / "kind" / "reader.py").write_text(textwrap.dedent("""
        import io, json
        import numpy as np
        from pathlib import Path
        from PIL import Image

        def plain(path):
            return open(path).read()

        def reads(path):
            return Path(path).read_text(), np.load(path), Image.open(path), json.load(path.open())

        class Trace:
            def rows(self, path):
                with open(path, mode="rb") as f:
                    return f.read()

        def fine(path, data):
            with open(path, "w") as f:
                f.write("x")
            return Image.open(io.BytesIO(data))
    """))
    hits = scan(package)
    where = sorted((h.path, h.function, h.call.split("(")[0]) for h in hits)
    assert where == sorted([
        ("pkg/kind/reader.py", "plain", "open"),
        ("pkg/kind/reader.py", "reads", "Path"),
        ("pkg/kind/reader.py", "reads", "np.load"),
        ("pkg/kind/reader.py", "reads", "Image.open"),
        ("pkg/kind/reader.py", "reads", "json.load"),
        ("pkg/kind/reader.py", "reads", "path.open"),
        ("pkg/kind/reader.py", "Trace.rows", "open"),
    ]), hits
