"""The schema of the evaluation database: one row per run folder, one row per number read from it.

A run is keyed by the results root it was indexed from and its folder relative to that root, so one PostgreSQL
database can hold the results trees of several machines or people; the embedded SQLite file of a results root
holds that root alone. The columns are what queries filter and rank on; every other number of LoadGen's summary
(percentiles, tokens/s, TTFT/TPOT) and of a session run's ``sessions_summary.json`` is a row of ``metrics``, so a
figure nobody filtered on yet needs no migration. Changing a column here needs an Alembic revision in
``migrations/versions`` (``tests/test_results_db.py`` compares the two).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# what a run folder is part of (the indexer decides from where it lies)
KINDS = ("run", "submission", "sweep_point", "campaign_job")
VALIDITIES = ("VALID", "INVALID", "n.a.")  # n.a.: accuracy runs (LoadGen judges validity in performance mode)


class Base(DeclarativeBase):
    pass


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("root", "folder", name="uq_runs_root_folder"),
                      Index("ix_runs_query", "benchmark", "scenario", "mode", "system"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    root: Mapped[str] = mapped_column(String(1024))  # the results root it was indexed from (absolute)
    folder: Mapped[str] = mapped_column(String(1024))  # relative to root, '/'-separated
    kind: Mapped[str] = mapped_column(String(16))  # one of KINDS
    signature: Mapped[str] = mapped_column(String(64))  # the folder's files (names, sizes, mtimes), hashed
    indexed_at: Mapped[datetime] = mapped_column(DateTime)

    benchmark: Mapped[str | None] = mapped_column(String(128))
    mlperf_model: Mapped[str | None] = mapped_column(String(128))  # LoadGen's conf model (mlperf.conf's name)
    manifest: Mapped[str | None] = mapped_column(String(256))
    scenario: Mapped[str | None] = mapped_column(String(32))
    mode: Mapped[str | None] = mapped_column(String(32))
    compliance_test: Mapped[str | None] = mapped_column(String(16))  # TEST01 ... when an audit's run
    system: Mapped[str | None] = mapped_column(String(256))
    node_id: Mapped[str | None] = mapped_column(String(128))  # the executor's node, when one ran it
    host: Mapped[str | None] = mapped_column(String(256))  # the node's address, else the run's hostname
    executor: Mapped[str | None] = mapped_column(String(32))  # the executor backend (local, ray), when recorded
    framework: Mapped[str | None] = mapped_column(String(64))
    framework_version: Mapped[str | None] = mapped_column(String(64))
    round: Mapped[str | None] = mapped_column(String(16))
    loadgen_version: Mapped[str | None] = mapped_column(String(32))
    mlharness_version: Mapped[str | None] = mapped_column(String(32))
    git_commit: Mapped[str | None] = mapped_column(String(64))  # the mlharness checkout's HEAD that ran it
    git_dirty: Mapped[bool | None] = mapped_column()  # that checkout's package differed from its HEAD
    label: Mapped[str | None] = mapped_column(String(256))  # the user's label (MLHARNESS_RUN_LABEL)
    validity: Mapped[str] = mapped_column(String(8))  # one of VALIDITIES: the verdict under the round's rules
    waived: Mapped[str | None] = mapped_column(Text)  # why VALID where LoadGen's line reads INVALID (the round)
    submittable: Mapped[bool | None] = mapped_column()
    metric_name: Mapped[str | None] = mapped_column(String(128))
    metric_value: Mapped[float | None] = mapped_column(Float)
    metric_unit: Mapped[str | None] = mapped_column(String(32))
    accuracy_name: Mapped[str | None] = mapped_column(String(128))
    accuracy_value: Mapped[float | None] = mapped_column(Float)
    accuracy_text: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None] = mapped_column(DateTime)  # LoadGen's detail log: first and last event
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)

    metrics: Mapped[list[Metric]] = relationship(back_populates="run", cascade="all, delete-orphan",
                                                 passive_deletes=True)


class Metric(Base):
    __tablename__ = "metrics"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(256), primary_key=True)  # LoadGen's summary line, verbatim
    value: Mapped[float] = mapped_column(Float)

    run: Mapped[Run] = relationship(back_populates="metrics")


class LayerTiming(Base):
    """A layer configuration's standalone kernel time on one host and runtime (``mlharness analyze lower-bound``):
    measured once, read again by every later analysis of any model with that layer."""

    __tablename__ = "layer_timings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)  # SHA-256 of the layer's configuration
    host: Mapped[str] = mapped_column(String(64), primary_key=True)  # SHA-256 of the CPU, runtime and threads
    op_type: Mapped[str] = mapped_column(String(256))  # the op types of the layer (a chain: joined with +)
    config: Mapped[str] = mapped_column(Text)  # the configuration as JSON
    host_text: Mapped[str] = mapped_column(Text)  # what the host hash covers, readable
    median_s: Mapped[float] = mapped_column(Float)
    q1_s: Mapped[float] = mapped_column(Float)
    q3_s: Mapped[float] = mapped_column(Float)
    runs: Mapped[int] = mapped_column(Integer)
    measured_at: Mapped[datetime] = mapped_column(DateTime)
