"""Tests for mlharness.manifest.assets against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import io
import logging
import tarfile
import threading
import zipfile
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mlharness.errors import AssetError
from mlharness.manifest import assets
from mlharness.manifest.assets import (
    cache_dir,
    file_digest,
    parse_checksum,
    resolve_asset,
    verify_checksum,
)

PAYLOAD = b"fake onnx graph bytes\n" * 100
SHA = hashlib.sha256(PAYLOAD).hexdigest()
MD5 = hashlib.md5(PAYLOAD).hexdigest()


class FileServer:
    """Serves in-memory files; `truncated` paths promise more bytes than they send, then hang up."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.truncated: set[str] = set()
        self.requests: Counter[str] = Counter()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (stdlib name)
                server.requests[self.path] += 1
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                extra = 10_000 if self.path in server.truncated else 0
                self.send_header("Content-Length", str(len(body) + extra))
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return self.base + path

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[FileServer]:
    s = FileServer()
    s.files["/models/graph.onnx"] = PAYLOAD
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("MLHARNESS_CACHE", str(root))
    return root


def cached_files(root: Path) -> list[Path]:
    """Every file (including hidden .partial-*) under the cache."""
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def make_tar_gz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


# ---------------------------------------------------------------- cache_dir / checksums


def test_cache_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLHARNESS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == (tmp_path / "xdg" / "mlharness").resolve()
    assert cache_dir().is_dir()
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "explicit"))
    assert cache_dir() == (tmp_path / "explicit").resolve()
    monkeypatch.delenv("MLHARNESS_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == (tmp_path / "home" / ".cache" / "mlharness").resolve()


def test_parse_checksum_forms() -> None:
    assert parse_checksum(f"sha256:{SHA.upper()}") == ("sha256", SHA)
    assert parse_checksum(f"md5:{MD5}") == ("md5", MD5)
    assert parse_checksum(MD5) == ("md5", MD5)
    assert parse_checksum(SHA) == ("sha256", SHA)


@pytest.mark.parametrize(
    "bad",
    ["", "abc", "sha1:" + "0" * 40, "sha256:" + MD5, "md5:" + SHA, "z" * 32, "sha256:" + "g" * 64, "0" * 40],
)
def test_parse_checksum_rejects(bad: str) -> None:
    with pytest.raises(AssetError) as e:
        parse_checksum(bad)
    assert repr(bad) in str(e.value)


def test_file_digest_and_verify(tmp_path: Path) -> None:
    f = tmp_path / "x.bin"
    f.write_bytes(PAYLOAD)
    assert file_digest(f, "sha256") == SHA
    assert file_digest(f, "md5") == MD5
    verify_checksum(f, None)
    verify_checksum(f, "")
    verify_checksum(f, MD5)
    bad = "0" * 64
    with pytest.raises(AssetError) as e:
        verify_checksum(f, bad)
    msg = str(e.value)
    assert str(f) in msg and "sha256" in msg and bad in msg and SHA in msg


# ---------------------------------------------------------------- remote assets


def test_download_verifies_and_reuses_cache(server: FileServer, cache: Path) -> None:
    url = server.url("/models/graph.onnx")
    path = resolve_asset(url, checksum=f"sha256:{SHA}")
    assert path.is_absolute() and path.read_bytes() == PAYLOAD
    assert path.name == "graph.onnx"
    assert path.parent == cache.resolve() / hashlib.sha256(url.encode()).hexdigest()[:16]
    assert server.requests["/models/graph.onnx"] == 1

    again = resolve_asset(url, checksum=f"sha256:{SHA}")
    assert again == path
    assert server.requests["/models/graph.onnx"] == 1, "second call must come from the cache"
    assert cached_files(cache) == [path]


def test_download_with_bare_md5(server: FileServer, cache: Path) -> None:
    path = resolve_asset(server.url("/models/graph.onnx"), checksum=MD5)
    assert path.read_bytes() == PAYLOAD


def test_mismatch_after_download_leaves_nothing(server: FileServer, cache: Path) -> None:
    url = server.url("/models/graph.onnx")
    wrong = "f" * 64
    with pytest.raises(AssetError) as e:
        resolve_asset(url, checksum=f"sha256:{wrong}")
    msg = str(e.value)
    assert url in msg and wrong in msg and SHA in msg and "sha256" in msg
    assert cached_files(cache) == []


def test_corrupted_cache_detected_on_next_use(server: FileServer, cache: Path) -> None:
    url = server.url("/models/graph.onnx")
    path = resolve_asset(url, checksum=SHA)
    path.write_bytes(b"tampered")
    with pytest.raises(AssetError) as e:
        resolve_asset(url, checksum=SHA)
    msg = str(e.value)
    assert str(path) in msg and "delete" in msg
    assert SHA in msg and hashlib.sha256(b"tampered").hexdigest() in msg
    assert server.requests["/models/graph.onnx"] == 1, "must not silently re-download"
    assert path.read_bytes() == b"tampered"


def test_http_404(server: FileServer, cache: Path) -> None:
    url = server.url("/models/missing.onnx")
    with pytest.raises(AssetError) as e:
        resolve_asset(url, checksum=SHA)
    assert "404" in str(e.value) and url in str(e.value)
    assert cached_files(cache) == []


def test_connection_closed_mid_body_leaves_no_partial(server: FileServer, cache: Path) -> None:
    server.files["/models/short.onnx"] = PAYLOAD
    server.truncated.add("/models/short.onnx")
    url = server.url("/models/short.onnx")
    with pytest.raises(AssetError) as e:
        resolve_asset(url)  # no checksum: the truncation itself must be detected
    assert url in str(e.value)
    assert cached_files(cache) == []


def test_keyboard_interrupt_leaves_no_partial(
    server: FileServer, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_download = assets._download

    def interrupted(url: str, out, progress: bool) -> None:
        real_download(url, out, progress)
        out.flush()
        raise KeyboardInterrupt

    monkeypatch.setattr(assets, "_download", interrupted)
    with pytest.raises(KeyboardInterrupt):
        resolve_asset(server.url("/models/graph.onnx"))
    assert cached_files(cache) == []


def test_base_url_joining(server: FileServer, cache: Path) -> None:
    for base, rel in [(server.base + "/models/", "/graph.onnx"), (server.base + "/models", "graph.onnx")]:
        path = resolve_asset(rel, base_url=base, checksum=SHA)
        assert path.read_bytes() == PAYLOAD
    # Both spellings join to the same URL, hence the same cache entry and a single request.
    assert server.requests == Counter({"/models/graph.onnx": 1})


def test_progress_logged(server: FileServer, cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=assets.__name__):
        resolve_asset(server.url("/models/graph.onnx"), progress=True)
    assert any("100%" in r.getMessage() for r in caplog.records)


def test_file_url(tmp_path: Path, cache: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(PAYLOAD)
    path = resolve_asset(src.as_uri(), checksum=SHA)
    assert path.read_bytes() == PAYLOAD and cache.resolve() in path.parents


# ---------------------------------------------------------------- local assets


def test_local_relative_to_manifest_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mdir = tmp_path / "manifests"
    (mdir / "models").mkdir(parents=True)
    (mdir / "models" / "g.onnx").write_bytes(PAYLOAD)
    monkeypatch.chdir(tmp_path)  # CWD must not be used when manifest_dir is given
    path = resolve_asset("models/g.onnx", manifest_dir=mdir, checksum=SHA)
    assert path == (mdir / "models" / "g.onnx").resolve() and path.is_absolute()
    with pytest.raises(AssetError) as e:
        resolve_asset("models/g.onnx", manifest_dir=mdir, checksum="0" * 32)
    assert MD5 in str(e.value)


def test_local_relative_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "g.onnx").write_bytes(PAYLOAD)
    monkeypatch.chdir(tmp_path)
    assert resolve_asset("g.onnx") == (tmp_path / "g.onnx").resolve()


def test_local_missing(tmp_path: Path) -> None:
    with pytest.raises(AssetError) as e:
        resolve_asset("models/nope.onnx", manifest_dir=tmp_path)
    msg = str(e.value)
    assert "models/nope.onnx" in msg and "does not exist" in msg


# ---------------------------------------------------------------- archives


def test_remote_tar_gz_extracted_and_reused(
    tmp_path: Path, server: FileServer, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = make_tar_gz(tmp_path / "m.tar.gz", {"model/saved_model.pb": b"pb", "model/vars/v": b"vv"})
    data = archive.read_bytes()
    server.files["/m.tar.gz"] = data
    checksum = "sha256:" + hashlib.sha256(data).hexdigest()

    folder = resolve_asset(server.url("/m.tar.gz"), checksum=checksum, is_archive=True)
    assert folder.is_dir() and folder.is_absolute() and folder.name == "m.tar.gz.extracted"
    assert (folder / "model" / "saved_model.pb").read_bytes() == b"pb"
    assert (folder / "model" / "vars" / "v").read_bytes() == b"vv"
    assert not list(folder.parent.glob(".partial-*"))

    marker = folder / "marker"
    marker.write_text("kept")

    def no_reextract(*args: object, **kwargs: object) -> None:
        raise AssertionError("extracted folder must be reused, not re-extracted")

    monkeypatch.setattr(tarfile, "open", no_reextract)
    again = resolve_asset(server.url("/m.tar.gz"), checksum=checksum, is_archive=True)
    assert again == folder and marker.exists()
    assert server.requests["/m.tar.gz"] == 1


def test_local_zip_extracted(tmp_path: Path) -> None:
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a/b.txt", "hello")
    folder = resolve_asset("m.zip", manifest_dir=tmp_path, is_archive=True)
    assert folder == (tmp_path / "m.zip.extracted").resolve()
    assert (folder / "a" / "b.txt").read_text() == "hello"


def test_reused_extraction_still_verifies_archive(tmp_path: Path) -> None:
    archive = make_tar_gz(tmp_path / "m.tgz", {"f": b"1"})
    resolve_asset(str(archive), is_archive=True)
    with pytest.raises(AssetError):
        resolve_asset(str(archive), is_archive=True, checksum="0" * 64)


@pytest.mark.parametrize("evil", ["../evil", "ok/../../evil", "/tmp/evil-abs"])
def test_tar_with_escaping_member_refused(tmp_path: Path, evil: str) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    archive = make_tar_gz(sub / "bad.tar.gz", {"fine.txt": b"ok", evil: b"pwned"})
    with pytest.raises(AssetError) as e:
        resolve_asset(str(archive), is_archive=True)
    assert evil in str(e.value)
    assert not (tmp_path / "evil").exists() and not (sub / "evil").exists()
    assert not (sub / "bad.tar.gz.extracted").exists()
    assert not list(sub.glob(".partial-*"))


def test_zip_with_escaping_member_refused(tmp_path: Path) -> None:
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../evil", "pwned")
    with pytest.raises(AssetError) as e:
        resolve_asset(str(archive), is_archive=True)
    assert "../evil" in str(e.value)
    assert not (tmp_path / "bad.zip.extracted").exists()


def test_not_an_archive(tmp_path: Path) -> None:
    (tmp_path / "plain.bin").write_bytes(PAYLOAD)
    with pytest.raises(AssetError) as e:
        resolve_asset("plain.bin", manifest_dir=tmp_path, is_archive=True)
    assert "not a .tar" in str(e.value)
    assert not list(tmp_path.glob(".partial-*"))
