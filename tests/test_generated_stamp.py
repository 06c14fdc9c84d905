"""A generated model is reused on the word of the stamp its generator wrote beside it (recipe, size, modification
time), so a run does not import onnx to look inside a model it wrote itself; a changed file, another recipe or
something that is not a regular file is checked the long way or written again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mlharness.tasks.demo.models import DEMO_RECIPE, ensure_demo_model
from mlharness.tasks.files import mark_generated, reuse_generated


def test_a_stamped_model_is_reused_without_importing_onnx(tmp_path: Path) -> None:
    model = ensure_demo_model(tmp_path / "demo.onnx")
    assert reuse_generated(model, DEMO_RECIPE)
    code = ("import sys; from mlharness.tasks.demo.models import ensure_demo_model; "
            f"ensure_demo_model({str(model)!r}); print('onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_a_file_changed_after_its_stamp_is_written_again(tmp_path: Path) -> None:
    model = ensure_demo_model(tmp_path / "demo.onnx")
    good = model.read_bytes()
    with open(model, "ab") as f:
        f.write(b"\0not onnx")
    assert not reuse_generated(model, DEMO_RECIPE)
    ensure_demo_model(model)  # found broken by onnx's checker: written again, and stamped
    assert model.read_bytes() == good and reuse_generated(model, DEMO_RECIPE)


def test_the_same_size_rewritten_later_is_not_taken_on_the_stamps_word(tmp_path: Path) -> None:
    path = mark_generated(_file(tmp_path / "m.bin", b"abc"), "r1")
    assert reuse_generated(path, "r1") and not reuse_generated(path, "r2")
    st = path.stat()
    path.write_bytes(b"xyz")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert not reuse_generated(path, "r1")


def test_a_link_or_a_missing_stamp_is_not_reused(tmp_path: Path) -> None:
    target = mark_generated(_file(tmp_path / "m.bin", b"abc"), "r")
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    (tmp_path / ".link.bin.generated").write_bytes((tmp_path / ".m.bin.generated").read_bytes())
    assert reuse_generated(target, "r") and not reuse_generated(link, "r")
    (tmp_path / ".m.bin.generated").write_text("not json {")
    assert not reuse_generated(target, "r")
    assert not reuse_generated(tmp_path / "absent.bin", "r")


def _file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
