"""Which Ray cluster ``--cluster auto`` joins: the one named by ``RAY_ADDRESS``, or the one this user started for
mlharness with ``mlharness cluster start`` (recorded in a file of mlharness's own), never another job's.

Ray's own "auto" takes the address in its address file (``/tmp/ray/ray_current_cluster``) or any GCS process it
finds on the host: on a shared machine that is another job's head, whose GCS mlharness would then wait on (or run
its work on). Without ``RAY_ADDRESS`` and without a recorded cluster, ``auto`` runs on this machine alone, saying
so and naming the head it left alone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mlharness.cluster.connect import connect_timeout, probe_grpc
from mlharness.errors import SettingsError

log = logging.getLogger(__name__)

RECORD_NAME = "ray_cluster.json"
RECORD_LIMIT = 64 << 10


def state_dir() -> Path:
    """mlharness's own state folder of this user: ``$XDG_STATE_HOME/mlharness`` (``~/.local/state/mlharness``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mlharness"


def record_path() -> Path:
    return state_dir() / RECORD_NAME


def read_head() -> dict[str, Any] | None:
    """The cluster ``mlharness cluster start`` recorded for this user, or None. A record of another user (a
    shared state folder) is not ours: ignored, with a warning."""
    from mlharness import fileguard

    path = record_path()
    if not os.path.lexists(path):
        return None
    data = fileguard.read_json(path, "mlharness's record of its Ray cluster", RECORD_LIMIT, error=SettingsError)
    if not isinstance(data, dict) or not isinstance(data.get("address"), str):
        raise SettingsError(f"mlharness's record of its Ray cluster {path} holds no address: remove it, then "
                            "`mlharness cluster start` again")
    if data.get("uid") != os.getuid() or path.stat().st_uid != os.getuid():
        log.warning("%s was written by another user: not joining the cluster it names", path)
        return None
    return data


def foreign_head() -> str | None:
    """The address in Ray's address file (another job's head, unless it is ours), for the message only."""
    try:
        from ray._common.utils import get_ray_address_file
    except ImportError:
        return None
    path = Path(get_ray_address_file(None))
    try:  # a few bytes of a file Ray wrote; read only to name it in a message
        from mlharness import fileguard

        return fileguard.read_bytes_bounded(path, "Ray's address file", 4096, error=OSError).decode(
            "utf-8", "replace").strip() or None
    except OSError:
        return None


def auto_address() -> str | None:
    """The address ``--cluster auto`` joins, or None: run on this machine alone (said in a warning)."""
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env:
        return env
    head = read_head()
    if head is not None:
        return head["address"]
    other = foreign_head()
    log.warning("--cluster auto: no Ray cluster started by `mlharness cluster start` for this user and no "
                "RAY_ADDRESS: running on this machine alone (the local executor)"
                + (f"; the Ray head at {other} named by Ray's address file was left alone (not started for "
                   "mlharness: name it with --cluster or RAY_ADDRESS to use it)" if other else ""))
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_head(host: str, port: int | None, extra: list[str]) -> dict[str, Any]:
    """``ray start --head`` on a free port (or ``port``), recorded as this user's mlharness cluster."""
    ray_cli = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    if not Path(ray_cli).exists():
        raise SettingsError("mlharness cluster start needs Ray, which is not installed: "
                            "pip install 'mlharness[cluster]'")
    port = port or _free_port()
    argv = [ray_cli, "start", "--head", f"--node-ip-address={host}", f"--port={port}", "--disable-usage-stats",
            "--include-dashboard=false", *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SettingsError(f"`{' '.join(argv)}` failed (exit {done.returncode}): {' / '.join(tail)}")
    address = f"{host}:{port}"
    probe_grpc(address, "the Ray head just started", connect_timeout())
    record = {"address": address, "uid": os.getuid(), "started": time.time(), "argv": argv}
    path = record_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{RECORD_NAME}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return record
