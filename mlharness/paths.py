"""Where the data that ships inside the package lives (package data, so it works from a wheel too)."""

from __future__ import annotations

from pathlib import Path

DATA_ROOT = Path(__file__).resolve().parent
"""The installed ``mlharness`` package folder, which holds the built-in data folders below."""

MANIFESTS_DIR = DATA_ROOT / "manifests"  # built-in model manifests; dataset manifests under datasets/
USER_CONF_DIR = DATA_ROOT / "user_conf"  # default user.conf files: <model>.conf, else default.conf
AUDIT_DIR = DATA_ROOT / "audit"  # compliance audit configs: <TEST>/audit.config, <TEST>/<model>/audit.config
