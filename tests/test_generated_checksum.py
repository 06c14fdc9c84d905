"""A model written by ``model.generator`` is held to ``model.graph_checksum`` like a downloaded one: a wrong digest
fails the run with exit 2 naming the manifest, the field and both digests, before the model loads; the right one
runs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import yaml

from mlharness.paths import MANIFESTS_DIR

WRONG = "sha256:" + "0" * 64


def _demo_with_checksum(tmp_path: Path, checksum: str) -> Path:
    doc = yaml.safe_load((MANIFESTS_DIR / "demo" / "demo.yaml").read_text())
    doc["model"]["graph_checksum"] = checksum
    path = tmp_path / "demo.yaml"  # the same name: the same generated model in the cache
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run(tmp_path: Path, env: dict[str, str], manifest: Path, out: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest), "--scenario",
                           "Offline", "--count", "8", "--output", str(tmp_path / out), "--no-progress"],
                          capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)


def test_generated_model_is_checked_against_graph_checksum(tmp_path: Path, env: dict[str, str]) -> None:
    manifest = _demo_with_checksum(tmp_path, WRONG)
    proc = _run(tmp_path, env, manifest, "wrong")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"{manifest}: field 'model.graph_checksum'" in proc.stderr, proc.stderr
    generated = Path(env["MLHARNESS_CACHE"]) / "generated" / "demo" / "demo_oracle.onnx"
    actual = hashlib.sha256(generated.read_bytes()).hexdigest()
    flat = " ".join(proc.stderr.split())  # the message may be wrapped
    assert f"expected {'0' * 64}, got {actual}" in flat, proc.stderr
    assert not (tmp_path / "wrong").exists()

    manifest = _demo_with_checksum(tmp_path, f"sha256:{actual}")
    proc = _run(tmp_path, env, manifest, "right")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "right" / "mlharness_run.json").is_file()
    assert os.path.getsize(generated) > 0
