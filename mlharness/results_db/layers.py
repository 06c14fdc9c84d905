"""The layer timings of the evaluation database: a layer configuration's standalone kernel time, per host and
runtime, so that ``mlharness analyze lower-bound`` measures each configuration once (``layer_timings``)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from mlharness.results_db.db import failed


@dataclass
class Timing:
    median_s: float
    q1_s: float
    q3_s: float
    runs: int


def host_key(runtime: str, threads: int | None) -> tuple[str, str]:
    """The hash that keys a host's timings, and what it covers: CPU model and count, runtime, threads."""
    from mlharness.telemetry.sysinfo import host_facts

    facts = host_facts()
    text = f"{facts.get('cpu_model')} | {os.cpu_count()} CPUs | {runtime} | threads {threads or 'default'}"
    return hashlib.sha256(text.encode()).hexdigest(), text


def cached(engine: Any, host: str, keys: list[str]) -> dict[str, Timing]:
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.orm import Session

    from mlharness.results_db.models import LayerTiming

    out: dict[str, Timing] = {}
    try:
        with Session(engine) as s:
            for i in range(0, len(keys), 500):  # bounded IN lists
                stmt = select(LayerTiming).where(LayerTiming.host == host, LayerTiming.key.in_(keys[i:i + 500]))
                for row in s.scalars(stmt):
                    out[row.key] = Timing(row.median_s, row.q1_s, row.q3_s, row.runs)
    except SQLAlchemyError as e:
        raise failed(engine, e, "could not be read") from None
    return out


def store(engine: Any, host: str, host_text: str, rows: list[tuple[str, str, dict[str, Any], Timing]]) -> None:
    """Keep (key, op types, configuration, timing) rows; a key already there keeps its first measurement."""
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.orm import Session

    from mlharness.results_db.models import LayerTiming

    now = datetime.now(timezone.utc).replace(tzinfo=None)
    try:
        with Session(engine) as s:
            have = set(cached(engine, host, [k for k, *_ in rows]))
            for key, ops, config, t in rows:
                if key not in have:
                    s.add(LayerTiming(key=key, host=host, op_type=ops[:256], config=json.dumps(config, sort_keys=True),
                                      host_text=host_text, median_s=t.median_s, q1_s=t.q1_s, q3_s=t.q3_s,
                                      runs=t.runs, measured_at=now))
                    have.add(key)
            s.commit()
    except SQLAlchemyError as e:
        raise failed(engine, e, "could not be written") from None
