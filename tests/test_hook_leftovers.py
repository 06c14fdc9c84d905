"""What a hook does cannot move a run's results or pass unchecked: a hook's ``os.chdir`` leaves a relative
``--results-root`` where it was; ``before_preprocess`` returns None or a positive int, anything else is refused
naming the hook and the manifest; a Ctrl-C while a hook is loaded or runs names that hook.

Runs that a hook changes the process of (chdir, signals) use the real CLI in a subprocess with a timeout, on the
toy ``echo`` predictor (no framework)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mlharness.errors import HookError
from mlharness.manifest.hooks import HookSet
from mlharness.manifest.loader import load_manifest
from mlharness.run.context import sample_count
from tests.helpers.toy_manifest import toy_manifest

TIMEOUT_S = 60


def write_manifest(folder: Path, **hooks: str) -> Path:
    m = toy_manifest(warmup=0)
    for key, source in hooks.items():
        if key == "init":
            m["dataset"]["init"] = source
        else:
            m[key] = source
    (folder / "model.bin").write_bytes(b"placeholder: the echo predictor never reads it")
    path = folder / "m.yaml"
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    return path


def command(manifest: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest), "--scenario", "Offline",
            "--mode", "accuracy", "--count", "4", "--no-progress", *extra]


def env(folder: Path) -> dict[str, str]:
    e = dict(os.environ, MLHARNESS_CACHE=str(folder / "cache"))
    e.pop("MLHARNESS_MANIFEST_PATH", None)
    return e


def test_a_hooks_chdir_does_not_move_a_relative_results_root(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    manifest = write_manifest(tmp_path, preprocess=(
        "import os\nimport numpy as np\nos.chdir('elsewhere')\n\n"
        "def preprocess(ctx, index):\n    return np.full(4, index, np.float32)\n"))
    r = subprocess.run(command(manifest, "--results-root", "res", "--system", "box"), cwd=tmp_path,
                       env=env(tmp_path), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "res" / "box" / "toy" / "Offline" / "accuracy" / "mlharness_run.json").is_file(), r.stdout
    assert not (tmp_path / "elsewhere" / "res").exists(), "the hook's chdir moved the results root"


BEFORE = "def before_preprocess(ctx):\n    return {value}\n"


@pytest.mark.parametrize("value", ["-1", "'x'", "0", "2.5", "True", "[3]"])
def test_before_preprocess_must_return_none_or_a_positive_int(tmp_path, value):
    manifest = write_manifest(tmp_path, before_preprocess=BEFORE.format(value=value))
    loaded = load_manifest(manifest)
    hooks = HookSet(loaded, {})
    with pytest.raises(HookError) as e:
        sample_count(hooks, None, {})
    text = str(e.value)
    assert f"hook 'before_preprocess' of {manifest}" in text, text
    assert f"must return None or a positive int (it caps the number of samples, like --count), got {value}" in text


@pytest.mark.parametrize(("value", "count", "total"), [("None", None, 8), ("3", None, 3), ("3", 2, 2),
                                                       ("__import__('numpy').int64(5)", None, 5)])
def test_before_preprocess_caps_the_sample_count(tmp_path, value, count, total):
    manifest = write_manifest(tmp_path, before_preprocess=BEFORE.format(value=value))
    hooks = HookSet(load_manifest(manifest), {})
    assert sample_count(hooks, count, {}) == total


@pytest.mark.parametrize(("hook", "source", "expect"), [
    ("preprocess", "import time\nfrom pathlib import Path\nPath('started').write_text('')\ntime.sleep(600)\n\n"
                   "def preprocess(ctx, index):\n    return index\n",
     "while loading hook 'preprocess' of {manifest} (its module-level code)"),
    ("init", "import time\nfrom pathlib import Path\n\ndef init(count):\n    Path('started').write_text('')\n"
             "    time.sleep(600)\n",
     "while hook 'init' of {manifest} was running"),
], ids=["loading", "running"])
def test_a_ctrl_c_in_a_hook_names_the_hook(tmp_path, hook, source, expect):
    manifest = write_manifest(tmp_path, **{hook: source})
    proc = subprocess.Popen(command(manifest, "--output", str(tmp_path / "out")), cwd=tmp_path, env=env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not (tmp_path / "started").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "started").exists(), proc.communicate(timeout=5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert expect.format(manifest=manifest) in stderr, stderr
