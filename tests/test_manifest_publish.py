"""A manifest published, found, cited and carried: `manifest show|search|cite|pack|unpack` on a user's manifest
with a hook file, a helper module its hook imports, a dataset manifest beside it and a `published` section."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from mlharness.errors import ManifestError
from mlharness.manifest.loader import load_manifest
from mlharness.manifest.pack import PackError, pack, unpack
from mlharness.manifest.published import Published
from mlharness.paths import MANIFESTS_DIR

CFF_SCHEMA = Path(__file__).parent / "fixtures" / "cff" / "schema-1.2.0.json"
PUBLISHED = """\
published:
  title: Colour patches, nearest-colour oracle
  authors:
    - {family_names: Lovelace, given_names: Ada, affiliation: Analytical Engines Ltd,
       orcid: "https://orcid.org/0000-0002-1825-0097"}
    - {name: The Colour Lab}
  domain: vision
  keywords: [colour, toy classifier]
  license: MIT
  doi: 10.5281/zenodo.1234567
  repository: https://example.org/colour-lab/colours
  date_released: 2026-11-30
  citation:
    type: article
    title: "Colour: a study of patches & hues"
    authors:
      - {family_names: Lovelace, given_names: Ada}
    year: 2026
    journal: Journal of Toy Models
    doi: 10.1234/jtm.2026.1
"""


@pytest.fixture(autouse=True)
def _cache(shared_cache, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))
    monkeypatch.delenv("MLHARNESS_MANIFEST_PATH", raising=False)


@pytest.fixture
def user_manifest(tmp_path) -> Path:
    """The demo model as a user's manifest: preprocess in hooks.py, which imports colour_helpers.py; the dataset
    manifest colours_data.yaml beside it; two files it does not name (never packed)."""
    folder = tmp_path / "colours"
    folder.mkdir()
    demo = (MANIFESTS_DIR / "demo" / "demo.yaml").read_text()
    head, _, _ = demo.partition("preprocess: |")
    text = head.replace("name: demo\n", "name: colours\n").replace("dataset: demo_images\n",
                                                                   "dataset: colours_data.yaml\n")
    text = text.replace("modality: image_classification\n", "modality: image_classification\n" + PUBLISHED)
    text += ("preprocess: {file: hooks.py}\npostprocess: |\n  import numpy as np\n\n  def postprocess(ctx, outputs):\n"
             "      return outputs[0].astype(np.float32)\n")
    (folder / "colours.yaml").write_text(text)
    dataset = (MANIFESTS_DIR / "datasets" / "demo_images.yaml").read_text().replace("name: demo_images",
                                                                                      "name: colours_data")
    (folder / "colours_data.yaml").write_text(dataset)
    (folder / "hooks.py").write_text("def preprocess(ctx, index):\n    import colour_helpers\n\n"
                                     "    return colour_helpers.patch(LOADED[index])\n")
    (folder / "colour_helpers.py").write_text("from mlharness.tasks.demo import dataset as demo\n\n\n"
                                              "def patch(path):\n    return demo.preprocess_demo(path, layout='NCHW')\n")
    (folder / "notes.txt").write_text("not part of the model\n")
    (folder / "other.yaml").write_text("name: other\n")
    return folder / "colours.yaml"


def test_show_and_cite_give_the_published_metadata(run_cli, user_manifest):
    shown = run_cli("manifest", "show", str(user_manifest))
    assert shown.returncode == 0, shown.stderr
    for text in ("Ada Lovelace (Analytical Engines Ltd, https://orcid.org/0000-0002-1825-0097)", "The Colour Lab",
                 "MIT", "10.5281/zenodo.1234567", "2026-11-30", "Journal of Toy Models"):
        assert text in shown.stdout, text
    cited = run_cli("manifest", "cite", str(user_manifest), "--format", "cff")
    assert cited.returncode == 0, cited.stderr
    doc = yaml.safe_load(cited.stdout)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads(CFF_SCHEMA.read_text()))  # the official CFF 1.2.0 schema
    assert doc["authors"][0] == {"family-names": "Lovelace", "given-names": "Ada",
                                 "affiliation": "Analytical Engines Ltd",
                                 "orcid": "https://orcid.org/0000-0002-1825-0097"}
    assert doc["preferred-citation"]["doi"] == "10.1234/jtm.2026.1" and doc["license"] == "MIT"
    bib = run_cli("manifest", "cite", str(user_manifest), "--format", "bibtex").stdout
    assert bib.startswith("@article{Lovelace2026colours,\n") and bib.count("{") == bib.count("}")
    assert "author = {Lovelace, Ada}" in bib and r"title = {Colour: a study of patches \& hues}" in bib
    assert "doi = {10.1234/jtm.2026.1}" in bib and "journal = {Journal of Toy Models}" in bib


def test_cite_without_published_metadata_says_what_is_missing(run_cli):
    proc = run_cli("manifest", "cite", "demo")
    assert proc.returncode == 2 and "has no 'published' section" in proc.stderr


@pytest.mark.parametrize("field,value,message", [
    ("license", "Apache 2.0 or so", "SPDX"), ("doi", "zenodo 1234", "DOI"), ("repository", "ftp://x", "http"),
])
def test_published_fields_are_validated(field, value, message):
    data = yaml.safe_load(PUBLISHED)["published"]
    with pytest.raises(ValueError, match=message):
        Published.model_validate({**data, field: value})
    with pytest.raises(ValueError, match="family_names"):
        Published.model_validate({**data, "authors": [{"given_names": "Ada"}]})


def test_a_bad_published_section_names_its_field(user_manifest):
    user_manifest.write_text(user_manifest.read_text().replace("license: MIT", "license: 'not a licence!'"))
    with pytest.raises(ManifestError, match=r"published\.license"):
        load_manifest(str(user_manifest))


def test_pack_carries_what_the_manifest_names_and_unpacks_into_a_runnable_copy(run_cli, user_manifest, tmp_path):
    archive = tmp_path / "colours.tar.gz"
    proc = run_cli("manifest", "pack", str(user_manifest), "--out", str(archive))
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(archive) as tf:
        names = sorted(m.name for m in tf.getmembers())
        listing = json.load(tf.extractfile("colours/mlharness-pack.json"))
    assert names == [f"colours/{n}" for n in ("README.md", "colour_helpers.py", "colours.yaml", "colours_data.yaml",
                                              "hooks.py", "mlharness-pack.json")]
    assert listing["assets"] == {"graph_path": "demo_oracle.onnx",
                                 "generator": "mlharness.tasks.demo.models:ensure_demo_model"}
    assert listing["published"]["license"] == "MIT" and listing["builtin_dataset"] is None
    assert listing["files"]["hooks.py"] == hashlib.sha256((user_manifest.parent / "hooks.py").read_bytes()).hexdigest()
    again = run_cli("manifest", "pack", str(user_manifest), "--out", str(archive))
    assert again.returncode == 2 and "not overwriting" in again.stderr

    dest = tmp_path / "elsewhere" / "colours"
    proc = run_cli("manifest", "unpack", str(archive), "--into", str(dest))
    assert proc.returncode == 0, proc.stderr
    for name in ("colours.yaml", "colours_data.yaml", "hooks.py", "colour_helpers.py"):
        assert (dest / name).read_bytes() == (user_manifest.parent / name).read_bytes()
    assert not (dest / "notes.txt").exists() and not (dest / "other.yaml").exists()
    run = run_cli("run", "--manifest", str(dest / "colours.yaml"), "--scenario", "Offline", "--mode", "accuracy",
                  "--count", "32", "--output", str(tmp_path / "run"), "--no-progress", timeout=240)
    assert run.returncode == 0, run.stderr
    assert "accuracy=100.000%" in (tmp_path / "run" / "accuracy.txt").read_text()


def _repack(archive: Path, out: Path, change) -> Path:
    """A copy of ``archive`` with its members passed through ``change(info, data) -> [(info, data), ...]``."""
    with tarfile.open(archive) as src, tarfile.open(out, "w:gz") as dst:
        for info in src.getmembers():
            data = src.extractfile(info).read() if info.isfile() else b""
            for new_info, new_data in change(info, data):
                new_info.size = len(new_data)
                dst.addfile(new_info, io.BytesIO(new_data) if new_info.isfile() else None)
    return out


def _link(info: tarfile.TarInfo, data: bytes):
    if info.name.endswith("hooks.py"):
        link = tarfile.TarInfo(info.name)
        link.type, link.linkname = tarfile.SYMTYPE, "colours.yaml"
        return [(link, b"")]
    return [(info, data)]


def _tamper(info: tarfile.TarInfo, data: bytes):
    return [(info, data.replace(b"return", b"import os; os.system('true'); return") if info.name.endswith("hooks.py")
             else data)]


def _escape(info: tarfile.TarInfo, data: bytes):
    extra = tarfile.TarInfo("colours/../../evil.py")
    return [(info, data), (extra, b"print('escaped')\n")] if info.name.endswith("hooks.py") else [(info, data)]


def _unlisted(info: tarfile.TarInfo, data: bytes):
    extra = tarfile.TarInfo("colours/sitecustomize.py")
    return [(info, data), (extra, b"print('hi')\n")] if info.name.endswith("hooks.py") else [(info, data)]


@pytest.mark.parametrize("change,message", [
    (_tamper, "does not match its SHA-256"), (_link, "only plain files"), (_escape, "'..' component"),
    (_unlisted, "not listed: ['sitecustomize.py']"),
])
def test_unpack_refuses_an_altered_pack_and_writes_nothing(user_manifest, tmp_path, change, message):
    good = tmp_path / "good.tar.gz"
    pack(str(user_manifest), good)
    bad = _repack(good, tmp_path / "bad.tar.gz", change)
    dest = tmp_path / "dest"
    with pytest.raises(PackError, match=re.escape(message)):
        unpack(bad, dest)
    assert not dest.exists() and not (tmp_path / "evil.py").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".dest")] == []  # its work folder is gone


def test_unpack_never_writes_into_a_folder_with_files(user_manifest, tmp_path):
    archive = tmp_path / "p.tar.gz"
    pack(str(user_manifest), archive)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "mine.txt").write_text("the user's")
    with pytest.raises(PackError, match="not unpacking over it"):
        unpack(archive, dest)
    assert [p.name for p in dest.iterdir()] == ["mine.txt"]


def test_pack_refuses_a_hook_file_outside_the_manifests_folder(user_manifest, tmp_path):
    (tmp_path / "outside.py").write_text("def preprocess(ctx, index):\n    return None\n")
    user_manifest.write_text(user_manifest.read_text().replace("{file: hooks.py}", "{file: ../outside.py}"))
    with pytest.raises(PackError, match="lies outside the manifest's folder"):
        pack(str(user_manifest), tmp_path / "x.tar.gz")
    assert not (tmp_path / "x.tar.gz").exists()


def test_search_by_text_filters_and_results(run_cli, user_manifest, tmp_path):
    folder = str(user_manifest.parent)
    found = run_cli("manifest", "search", "lovelace", "--path", folder)
    assert found.returncode == 0 and "colours" in found.stdout and "1 manifest(s)" in found.stdout
    assert run_cli("manifest", "search", "--license", "MIT", "--path", folder).stdout.count("colours.yaml") == 1
    none = run_cli("manifest", "search", "lovelace", "--license", "Apache", "--path", folder)
    assert none.returncode == 1 and "0 manifest(s)" in none.stdout
    builtin = run_cli("manifest", "search", "residual", "--task", "resnet")  # the built-in resnet50's citation
    assert "resnet50 " in builtin.stdout and "Apache-2.0" in builtin.stdout
    results = tmp_path / "results"
    run = run_cli("run", "--manifest", str(user_manifest), "--scenario", "Offline", "--mode", "performance",
                  "--count", "32", "--min-duration-ms", "200", "--results-root", str(results), "--system", "sysA",
                  "--no-progress", timeout=240)
    assert run.returncode == 0, run.stderr
    with_results = run_cli("manifest", "search", "colour", "--path", folder, "--results", str(results))
    assert with_results.returncode == 0, with_results.stderr
    assert re.search(r"sysA \(\d VALID\)", with_results.stdout), with_results.stdout
