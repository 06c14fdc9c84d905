"""A non-editable install works: the wheel carries the built-in data (manifests, user.conf files, audit configs)
as package data, and an installed copy finds it inside itself, not beside a source checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlharness.paths import AUDIT_DIR, DATA_ROOT, MANIFESTS_DIR, USER_CONF_DIR
from mlharness.submission.system import SYSTEM_TEMPLATE

pytestmark = pytest.mark.slow

REPO = DATA_ROOT.parent


def _data_files() -> list[str]:
    """Every file of the built-in data folders, as its path inside the wheel."""
    files = [p for d in (MANIFESTS_DIR, USER_CONF_DIR, AUDIT_DIR) for p in d.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts]
    files.append(SYSTEM_TEMPLATE)  # the example system file `mlharness submission system-template` prints
    return sorted(p.relative_to(REPO).as_posix() for p in files)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a clean copy of the sources (no stale build/ folder can supply the data)."""
    if not (REPO / "pyproject.toml").is_file():
        pytest.skip("not running from a source checkout")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "mlharness", src / "mlharness", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
           "-w", str(out), str(src)]
    if importlib.util.find_spec("setuptools") is not None:
        cmd.insert(4, "--no-build-isolation")  # offline and fast; else pip fetches the build backend
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (whl,) = out.glob("mlharness-*.whl")
    return whl


def test_wheel_ships_every_builtin_data_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = _data_files()
    for must in ("mlharness/manifests/demo/demo.yaml", "mlharness/manifests/datasets/demo_images.yaml",
                 "mlharness/manifests/datasets/imagenet.yaml", "mlharness/manifests/datasets/squad.yaml",
                 "mlharness/manifests/datasets/kits19.yaml", "mlharness/user_conf/default.conf",
                 "mlharness/audit/TEST01/audit.config", "mlharness/audit/TEST01/3d-unet/audit.config",
                 "mlharness/audit/TEST04/audit.config", "mlharness/audit/TEST05/audit.config"):
        assert must in expected, f"{must} is missing from the source tree"
    missing = [f for f in expected if f not in names]
    assert not missing, f"not in the wheel (add them to [tool.setuptools.package-data]): {missing}"
    # the data folders hold no code packages of their own
    assert not any(n.endswith("__init__.py") for n in names
                   if n.startswith(("mlharness/manifests/", "mlharness/user_conf/", "mlharness/audit/")))


def test_installed_wheel_finds_its_data_and_runs_the_demo(wheel: Path, tmp_path: Path, shared_cache: Path) -> None:
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet",
                           "--disable-pip-version-check", "--target", str(target), str(wheel)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pkg = target / "mlharness"
    env = dict(os.environ, PYTHONPATH=str(target), MLHARNESS_CACHE=str(shared_cache), COLUMNS="250")
    for key in ("MLHARNESS_MANIFEST_PATH", "MLHARNESS_DEMO_DIR"):
        env.pop(key, None)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=180, cwd=cwd,
                              env=env)

    probe = run("-c", "import json, mlharness.paths as p; from mlharness.loadgen.settings import default_user_conf;"
                      " from mlharness.submission.orchestrate import audit_config;"
                      " print(json.dumps([p.MANIFESTS_DIR.as_posix(), str(default_user_conf('resnet50')),"
                      " str(audit_config('TEST01', '3d-unet')), str(audit_config('TEST04', 'resnet50'))]))")
    assert probe.returncode == 0, probe.stderr
    for path in json.loads(probe.stdout):
        assert Path(path).exists() and Path(path).is_relative_to(pkg), path

    listed = run("-m", "mlharness.cli", "manifest", "list")
    assert listed.returncode == 0, listed.stderr
    for name in ("demo", "demo_images", "resnet50-oracle", "bert", "3d-unet", "imagenet", "squad", "kits19"):
        assert f" {name} " in listed.stdout, listed.stdout

    demo = run("-m", "mlharness.cli", "run", "--scenario", "Offline", "--mode", "accuracy", "--no-progress",
               "--output", str(tmp_path / "out"))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    meta = json.loads((tmp_path / "out" / "mlharness_run.json").read_text())
    assert Path(meta["user_conf"]).is_relative_to(pkg)
