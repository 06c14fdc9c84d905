"""Files a run reads or writes are bounded: a FIFO, a device, a folder or a broken link where a file is expected is
refused by name (never waited on, never read forever, never reported as "does not exist"); a model archive
cannot expand without limit; a manifest's ``framework.options`` cannot make a framework write outside the cache;
a mistyped ``--dataset-path`` is an error, never a freshly generated synthetic dataset.

Every stand-in (FIFO, sparse file, device node, symbolic link) is made inside ``tmp_path``; every file outside
the results root and the cache is hashed before and after each run. ``HOSTILE_FILE_CASES`` is importable by a
battery test elsewhere: ``materialise(case, folder)`` makes its files and returns its command line."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import subprocess
import sys
import tarfile
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlharness.errors import AssetError, DatasetError, SettingsError
from mlharness.fileguard import (
    FileTooLarge,
    UnusableFile,
    check_file_or_folder,
    check_regular_file,
    hash_file,
    read_bytes_bounded,
    read_text_bounded,
)
from mlharness.manifest import assets
from mlharness.manifest.archives import ArchiveLimits, extract_into
from tests.helpers.toy_manifest import toy_manifest
from tests.helpers.unix_socket import socket_file

RUN_SECONDS = 90  # one CLI run, imports and a tiny LoadGen test included; a hang fails the test here

# The affine ONNX model on an inline dataset of 4 samples: each case below breaks ONE thing of it.
BASE: dict[str, Any] = toy_manifest("onnxruntime", "affine.onnx", count=4)
RUN = ("run", "--scenario", "Offline", "--mode", "accuracy", "--count", "4", "--results-root", "{folder}/results",
       "--no-progress", "--min-duration-ms", "1", "--min-query-count", "1")
RUN_MANIFEST = (*RUN, "--manifest", "{folder}/m.yaml")
USER_TEXT = b"the user's own file: a run must never change it\n"


def manifest(**change: Any) -> dict[str, Any]:
    """BASE with top-level keys replaced; ``framework_options`` and ``model`` are merged in."""
    m = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    if "framework_options" in change:
        m["framework"]["options"] = change.pop("framework_options")
    if "model" in change:
        m["model"].update(change.pop("model"))
    m.update(change)
    return m


@dataclass(frozen=True)
class FileCase:
    """One hostile file: what to make, the command line, the exit code and substrings of the error."""

    id: str
    argv: tuple[str, ...]  # '{folder}' is the case's folder
    rc: int
    messages: tuple[str, ...]  # each must be in the output ('{folder}' formatted)
    files: dict[str, Any] = field(default_factory=dict)  # name -> spec, see make_file
    manifest: dict[str, Any] | None = None  # written as {folder}/m.yaml
    env: dict[str, str] = field(default_factory=dict)
    absent: tuple[str, ...] = ()  # paths (under the folder) that must not exist afterwards
    needs_mknod: bool = False  # makes a device node: root only


def _zip_bomb(megabytes: int) -> bytes:
    """A zip holding one file of zeros: ``megabytes`` MiB that compress to a few kilobytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        with zf.open("affine.onnx", "w", force_zip64=True) as f:
            chunk = bytes(1 << 20)
            for _ in range(megabytes):
                f.write(chunk)
    return buf.getvalue()


def _zip_of(n: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(n):
            zf.writestr(f"f{i}.txt", f"file {i}\n")
    return buf.getvalue()


HOSTILE_FILE_CASES: list[FileCase] = [
    FileCase("model-file-fifo", RUN_MANIFEST, 2, ("model.graph_path", "model.onnx", "is a FIFO, not a regular file"),
             files={"model.onnx": "fifo"}, manifest=manifest(model={"graph_path": "model.onnx"})),
    FileCase("model-file-fifo-checksum", RUN_MANIFEST, 2, ("model.graph_path", "is a FIFO, not a regular file"),
             files={"model.onnx": "fifo"},
             manifest=manifest(model={"graph_path": "model.onnx", "graph_checksum": "sha256:" + "0" * 64})),
    FileCase("model-file-device-checksum", RUN_MANIFEST, 2, ("model.graph_path", "is a character device"),
             files={"zero.onnx": "chardev"}, needs_mknod=True,
             manifest=manifest(model={"graph_path": "zero.onnx", "graph_checksum": "sha256:" + "0" * 64})),
    FileCase("model-file-socket", RUN_MANIFEST, 2, ("model.graph_path", "is a socket"),
             files={"m.sock": "socket"}, manifest=manifest(model={"graph_path": "m.sock"})),
    FileCase("manifest-fifo", (*RUN, "--manifest", "{folder}/fifo.yaml"), 2,
             ("{folder}/fifo.yaml", "is a FIFO, not a regular file"), files={"fifo.yaml": "fifo"}),
    FileCase("manifest-folder", (*RUN, "--manifest", "{folder}/dir.yaml"), 2,
             ("{folder}/dir.yaml", "is a folder, not a regular file"), files={"dir.yaml": "dir"}),
    FileCase("manifest-broken-link", (*RUN, "--manifest", "{folder}/link.yaml"), 2,
             ("{folder}/link.yaml", "broken symbolic link"), files={"link.yaml": ("link", "gone.yaml")}),
    FileCase("manifest-large-sparse", (*RUN, "--manifest", "{folder}/big.yaml"), 2,
             ("{folder}/big.yaml", "larger than 8 MiB"), files={"big.yaml": ("sparse", 64 << 20)}),
    FileCase("validate-manifest-fifo", ("manifest", "validate", "{folder}/fifo.yaml"), 2,
             ("fifo.yaml", "is a FIFO"), files={"fifo.yaml": "fifo"}),
    FileCase("validate-model-file-fifo", ("manifest", "validate", "{folder}/m.yaml"), 2,
             ("m.yaml", "model.graph_path", "is a FIFO, not a regular file"), files={"model.onnx": "fifo"},
             manifest=manifest(model={"graph_path": "model.onnx"})),
    FileCase("dataset-manifest-fifo", RUN_MANIFEST, 2, ("m.yaml", "'dataset'", "ds.yaml", "is a FIFO"),
             files={"ds.yaml": "fifo"}, manifest=manifest(dataset="ds.yaml")),
    FileCase("dataset-manifest-device", RUN_MANIFEST, 2, ("m.yaml", "'dataset'", "is a character device"),
             files={"ds.yaml": "chardev"}, manifest=manifest(dataset="ds.yaml"), needs_mknod=True),
    FileCase("demo-dataset-path-mistyped", (*RUN, "--dataset-path", "{folder}/imagenett"), 2,
             ("--dataset-path {folder}/imagenett does not exist",), absent=("imagenett",)),
    FileCase("demo-dataset-path-empty-folder", (*RUN, "--dataset-path", "{folder}/empty"), 2,
             ("{folder}/empty holds no demo dataset", "mlharness dataset synth demo"), files={"empty": "dir"}),
    FileCase("demo-dataset-val-map-fifo", (*RUN, "--dataset-path", "{folder}/images"), 2,
             ("val map {folder}/images/val_map.txt is a FIFO",), files={"images": "dir", "images/val_map.txt": "fifo"}),
    FileCase("demo-dataset-path-fifo", (*RUN, "--dataset-path", "{folder}/images"), 2,
             ("--dataset-path {folder}/images is a FIFO",), files={"images": "fifo"}),
    FileCase("dataset-path-mistyped", (*RUN_MANIFEST, "--dataset-path", "{folder}/data"), 2,
             ("--dataset-path {folder}/data does not exist",), manifest=manifest(), absent=("data",)),
    FileCase("optimized-model-outside", RUN_MANIFEST, 2,
             ("m.yaml", "framework.options.optimized_model_filepath", "outside mlharness's cache"),
             files={"user.onnx": ("bytes", USER_TEXT)},
             manifest=manifest(framework_options={"optimized_model_filepath": "{folder}/user.onnx"})),
    FileCase("optimized-model-dotdot", RUN_MANIFEST, 2,
             ("framework.options.optimized_model_filepath", "outside mlharness's cache"),
             files={"user.onnx": ("bytes", USER_TEXT)},
             manifest=manifest(framework_options={"optimized_model_filepath": "../../../user.onnx"})),
    FileCase("option-threads-not-integer", RUN_MANIFEST, 2, ("m.yaml", "framework.options.intra_op_num_threads"),
             manifest=manifest(framework_options={"intra_op_num_threads": "many"})),
    FileCase("option-threads-huge", RUN_MANIFEST, 2, ("m.yaml", "framework.options.intra_op_num_threads", "100000"),
             manifest=manifest(framework_options={"intra_op_num_threads": 100000})),
    FileCase("option-unknown", RUN_MANIFEST, 2, ("m.yaml", "'framework.options'", "unknown onnxruntime option"),
             manifest=manifest(framework_options={"optimise": True})),
    FileCase("option-provider-options-mismatch", RUN_MANIFEST, 2, ("framework.options.provider_options",),
             manifest=manifest(framework_options={"provider_options": [{}, {}]})),
    FileCase("archive-zip-bomb", RUN_MANIFEST, 2, ("model.graph_path", "bomb.zip", "expands", "archive bomb"),
             files={"bomb.zip": ("zip-bomb", 32)}, absent=("bomb.zip.extracted",),
             manifest=manifest(model={"graph_path": "bomb.zip", "is_archive": True, "model_file": "affine.onnx"})),
    FileCase("archive-too-many-entries", RUN_MANIFEST, 2, ("many.zip", "6 entries", "MLHARNESS_ARCHIVE_MAX_FILES"),
             files={"many.zip": ("bytes", _zip_of(6))}, env={"MLHARNESS_ARCHIVE_MAX_FILES": "5"},
             absent=("many.zip.extracted",),
             manifest=manifest(model={"graph_path": "many.zip", "is_archive": True, "model_file": "f0.txt"})),
]


def can_make(case: FileCase) -> bool:
    """False for a case that needs a device node where this process may not make one."""
    return not case.needs_mknod or os.geteuid() == 0


def make_file(path: Path, spec: Any) -> None:
    kind, arg = (spec, None) if isinstance(spec, str) else spec
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "chardev":  # reads as zeros without end, like /dev/zero, but inside the test's folder
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    elif kind == "socket":
        socket_file(path)
    elif kind == "link":
        os.symlink(arg, path)
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(arg)
    elif kind == "zip-bomb":
        path.write_bytes(_zip_bomb(arg))
    elif kind == "bytes":
        path.write_bytes(arg)
    else:
        raise ValueError(kind)


def materialise(case: FileCase, folder: Path) -> list[str]:
    """Make the case's files in ``folder`` (with the affine model beside them); its ``mlharness`` arguments."""
    from tests.helpers.framework_models import write_onnx

    folder.mkdir(parents=True, exist_ok=True)
    write_onnx(folder / "affine.onnx")
    for name, spec in case.files.items():
        make_file(folder / name, spec)
    if case.manifest is not None:
        text = yaml.safe_dump(case.manifest, sort_keys=False).replace("{folder}", str(folder))
        (folder / "m.yaml").write_text(text)
    return [a.replace("{folder}", str(folder)) for a in case.argv]


def case_env(case: FileCase, folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLHARNESS_")}
    env.update({"MLHARNESS_CACHE": str(folder / "cache"), "OMP_NUM_THREADS": "1", **case.env})
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    return env


def snapshot(folder: Path, skip: tuple[str, ...] = ("results", "cache")) -> dict[str, str]:
    """Every path under ``folder`` (but ``skip``) with its content hash, or its kind when it is not a file."""
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not (Path(root) == folder and d in skip)]
        for name in dirs + files:
            p = Path(root) / name
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[str(p)] = f"mode {stat.S_IFMT(st.st_mode):o}"
    return out


def run_mlharness(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *argv], capture_output=True, text=True,
                          timeout=RUN_SECONDS, env=env, cwd=cwd)


@pytest.mark.parametrize("case", HOSTILE_FILE_CASES, ids=lambda c: c.id)
def test_hostile_file(case: FileCase, tmp_path: Path) -> None:
    if not can_make(case):
        pytest.skip("making a device node needs root")
    folder = tmp_path / "w"
    argv = materialise(case, folder)
    before = snapshot(folder)
    r = run_mlharness(argv, case_env(case, folder), folder)
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out
    assert r.returncode == case.rc, out
    assert "error:" in r.stderr, out
    for text in case.messages:
        assert text.replace("{folder}", str(folder)) in r.stderr, f"{text!r} missing from:\n{out}"
    assert snapshot(folder) == before, "a file outside the results root and the cache changed"
    for name in case.absent:
        assert not (folder / name).exists(), name
    assert not (folder / "results").exists() or not any((folder / "results").rglob("mlperf_log_summary.txt"))


def test_cases_are_many_and_distinct() -> None:
    assert len(HOSTILE_FILE_CASES) >= 20
    assert len({c.id for c in HOSTILE_FILE_CASES}) == len(HOSTILE_FILE_CASES)


def test_base_manifest_runs(tmp_path: Path) -> None:
    """The cases break one thing each: the manifest they start from runs."""
    case = FileCase("base", RUN_MANIFEST, 0, (), manifest=manifest())
    folder = tmp_path / "w"
    r = run_mlharness(materialise(case, folder), case_env(case, folder), folder)
    assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------- framework options that write files


def test_optimized_model_inside_the_cache_is_written_there(tmp_path: Path) -> None:
    case = FileCase("ok", RUN_MANIFEST, 0, (), manifest=manifest(framework_options={
        "optimized_model_filepath": "opt/affine.opt.onnx"}))
    folder = tmp_path / "w"
    argv = materialise(case, folder)
    before = snapshot(folder)
    r = run_mlharness(argv, case_env(case, folder), folder)
    assert r.returncode == 0, r.stdout + r.stderr
    written = folder / "cache" / "framework-output" / "toy" / "opt" / "affine.opt.onnx"
    assert written.is_file() and written.stat().st_size > 0
    assert snapshot(folder) == before


def test_optimized_model_through_a_link_in_the_cache_is_refused(tmp_path: Path) -> None:
    """A symbolic link inside the cache that leads out of it: ONNX Runtime would follow it."""
    case = FileCase("link", RUN_MANIFEST, 2, (), manifest=manifest(framework_options={
        "optimized_model_filepath": "{folder}/cache/out.onnx"}), files={"user.onnx": ("bytes", USER_TEXT)})
    folder = tmp_path / "w"
    argv = materialise(case, folder)
    (folder / "cache").mkdir()
    os.symlink(folder / "user.onnx", folder / "cache" / "out.onnx")
    before = snapshot(folder)
    r = run_mlharness(argv, case_env(case, folder), folder)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "framework.options.optimized_model_filepath" in r.stderr and str(folder / "m.yaml") in r.stderr
    assert "outside mlharness's cache" in r.stderr, r.stderr
    assert (folder / "user.onnx").read_bytes() == USER_TEXT and snapshot(folder) == before


# ---------------------------------------------------------------- the demo's data


def test_demo_without_dataset_path_generates_its_own_data_and_says_so(tmp_path: Path) -> None:
    case = FileCase("demo", RUN, 0, ())
    folder = tmp_path / "w"
    r = run_mlharness(materialise(case, folder), case_env(case, folder), folder)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no --dataset-path given: generating" in r.stderr and str(folder / "cache" / "demo") in r.stderr
    assert "accuracy=100.000%" in r.stdout


def test_demo_reads_a_folder_made_by_dataset_synth(tmp_path: Path) -> None:
    case = FileCase("demo", (*RUN, "--dataset-path", "{folder}/mine"), 0, ())
    folder = tmp_path / "w"
    argv = materialise(case, folder)
    env = case_env(case, folder)
    r = run_mlharness(["dataset", "synth", "demo", "--out", str(folder / "mine"), "--count", "8"], env, folder)
    assert r.returncode == 0 and (folder / "mine" / "val_map.txt").is_file(), r.stdout + r.stderr
    before = snapshot(folder)
    r = run_mlharness(argv, env, folder)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "generating" not in r.stderr and not (folder / "cache" / "demo").exists()
    assert snapshot(folder) == before  # read, never written into


# ---------------------------------------------------------------- the shared checks


def _unblock(fifo: Path) -> None:
    """Give a reader blocked on ``fifo`` its end of file (opening for writing succeeds once a reader waits)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def _finishes(fn: Any, fifo: Path, seconds: float = 10.0) -> Any:
    """``fn()``'s result or exception; fails when it is still blocked after ``seconds`` (then unblocks it)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        _unblock(fifo)
        t.join(5)
        pytest.fail(f"still blocked on the FIFO {fifo} after {seconds} s")
    return box


@pytest.mark.parametrize("kind, expect", [
    ("fifo", "is a FIFO, not a regular file"),
    ("dir", "is a folder, not a regular file"),
    ("socket", "is a socket, not a regular file"),
    (("link", "nowhere"), "is a broken symbolic link (to nowhere)"),
])
def test_check_regular_file_names_the_kind(tmp_path: Path, kind: Any, expect: str) -> None:
    path = tmp_path / "x"
    make_file(path, kind)
    with pytest.raises(UnusableFile) as e:
        check_regular_file(path, "model file")
    assert f"model file {path} {expect}" in str(e.value)
    with pytest.raises(SettingsError, match="user.conf"):  # any error type the caller needs
        read_text_bounded(path, "user.conf", 1024, error=SettingsError)


def test_missing_and_odd_paths_are_told_apart(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    cases = {tmp_path / "none": "does not exist", tmp_path / "file" / "x": "a part of the path is a file",
             tmp_path / "loop1": "symbolic link loop"}
    for path, expect in cases.items():
        with pytest.raises(UnusableFile, match=expect):
            check_regular_file(path, "model file")
    assert check_regular_file(tmp_path / "file", "model file") == tmp_path / "file"
    assert check_file_or_folder(tmp_path, "--dataset-path") == tmp_path
    with pytest.raises(DatasetError, match="does not exist"):
        check_file_or_folder(tmp_path / "none", "--dataset-path", error=DatasetError)


def test_reads_are_bounded(tmp_path: Path) -> None:
    big = tmp_path / "big.conf"
    make_file(big, ("sparse", 1 << 30))  # 1 GiB that takes no disk
    with pytest.raises(FileTooLarge, match=r"user.conf .*big.conf is larger than 64 KiB"):
        read_bytes_bounded(big, "user.conf", 64 << 10)
    bad = tmp_path / "bad.conf"
    bad.write_bytes(b"a = 1\nb = \xff\n")
    with pytest.raises(UnusableFile, match="not UTF-8 text: byte 0xff at line 2, column 5"):
        read_text_bounded(bad, "user.conf", 1024)
    fifo = tmp_path / "conf.fifo"
    os.mkfifo(fifo)
    box = _finishes(lambda: read_text_bounded(fifo, "user.conf", 1024), fifo)
    assert isinstance(box.get("error"), UnusableFile) and "is a FIFO" in str(box["error"])


def test_dataset_index_files_are_bounded(tmp_path: Path) -> None:
    """The readers of a dataset's own files (val map, labels, vocabulary, JSON of samples, case list) refuse a
    FIFO without waiting and a file too large without reading it."""
    from mlharness.tasks.cnndm.dataset import read_records
    from mlharness.tasks.generic.dataset import read_features
    from mlharness.tasks.imagenet.dataset import read_val_map
    from mlharness.tasks.kits19.dataset import read_case_list
    from mlharness.tasks.squad.dataset import read_squad_examples, read_vocab

    fifo = tmp_path / "index.fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.json"
    make_file(huge, ("sparse", 4 << 30))  # 4 GiB that take no disk, refused from their size alone
    for reader in (read_val_map, read_features, read_vocab, read_records, read_squad_examples, read_case_list):
        box = _finishes(lambda reader=reader: reader(fifo), fifo)
        assert isinstance(box.get("error"), DatasetError) and "is a FIFO" in str(box["error"]), (reader, box)
        with pytest.raises(DatasetError, match="is larger than 1 GiB"):
            reader(huge)


def test_checksum_of_a_fifo_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    box = _finishes(lambda: assets.verify_checksum(fifo, "sha256:" + "0" * 64), fifo)
    assert isinstance(box.get("error"), AssetError) and "is a FIFO" in str(box["error"]), box
    box = _finishes(lambda: hash_file(fifo, "model file"), fifo)
    assert isinstance(box.get("error"), UnusableFile), box


# ---------------------------------------------------------------- archives


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_zip_bomb_refused_before_writing(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.zip"
    archive.write_bytes(_zip_bomb(8))
    before = snapshot(tmp_path)
    with pytest.raises(AssetError, match=r"expands .* times, more than the limit of 200"):
        assets.resolve_asset(str(archive), is_archive=True)
    with pytest.raises(AssetError, match="more than the limit of 4.0 MiB.*MLHARNESS_ARCHIVE_MAX_BYTES"):
        assets.resolve_asset(str(archive), is_archive=True, archive_limits={"max_bytes": 4 << 20, "max_ratio": 1e6})
    assert snapshot(tmp_path) == before  # no partial folder, nothing extracted


def test_limits_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "m.tar.gz"
    archive.write_bytes(_tar_gz({f"w{i}.bin": bytes(100) for i in range(4)}))
    monkeypatch.setenv("MLHARNESS_ARCHIVE_MAX_FILES", "3")
    with pytest.raises(AssetError, match="4 entries, more than the limit of 3"):
        assets.resolve_asset(str(archive), is_archive=True)
    monkeypatch.setenv("MLHARNESS_ARCHIVE_MAX_FILES", "lots")
    with pytest.raises(AssetError, match="MLHARNESS_ARCHIVE_MAX_FILES='lots'"):
        assets.resolve_asset(str(archive), is_archive=True)
    monkeypatch.delenv("MLHARNESS_ARCHIVE_MAX_FILES")
    folder = assets.resolve_asset(str(archive), is_archive=True)  # the defaults let it through
    assert sorted(p.name for p in folder.iterdir()) == ["w0.bin", "w1.bin", "w2.bin", "w3.bin"]


def test_tar_gz_bomb_refused_while_streaming(tmp_path: Path) -> None:
    """The size of a tar.gz's content is only known by reading it: the limit holds member by member."""
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(_tar_gz({"a.bin": bytes(3 << 20), "b.bin": bytes(3 << 20)}))
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(AssetError, match="more than the limit of 4.0 MiB"):
        extract_into(archive, dest, ArchiveLimits(max_bytes=4 << 20, max_ratio=1e6))
    assert sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) <= 4 << 20


def test_zip_whose_header_understates_its_size(tmp_path: Path) -> None:
    """A header that says 1 KiB for 2 MiB of data: never more than the declared bytes are written."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("w.bin", bytes(2 << 20))
    data = bytearray(buf.getvalue())
    for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # uncompressed size, local and central
        at = data.index(sig) + offset
        data[at:at + 4] = (1024).to_bytes(4, "little")
    archive = tmp_path / "liar.zip"
    archive.write_bytes(bytes(data))
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(AssetError, match="liar.zip"):
        extract_into(archive, dest, ArchiveLimits())
    assert sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) <= 1024
