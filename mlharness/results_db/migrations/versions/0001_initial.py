"""The first schema: runs (one row per run folder of a results root) and metrics (every number read from it).

Revision ID: 0001
Revises:
Create Date: 2026-05-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("root", sa.String(1024), nullable=False),
        sa.Column("folder", sa.String(1024), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("signature", sa.String(64), nullable=False),
        sa.Column("indexed_at", sa.DateTime(), nullable=False),
        *(sa.Column(name, sa.String(size), nullable=True) for name, size in (
            ("benchmark", 128), ("mlperf_model", 128), ("manifest", 256), ("scenario", 32), ("mode", 32),
            ("compliance_test", 16), ("system", 256), ("node_id", 128), ("host", 256), ("executor", 32),
            ("framework", 64), ("framework_version", 64), ("round", 16), ("loadgen_version", 32),
            ("mlharness_version", 32), ("git_commit", 64))),
        sa.Column("validity", sa.String(8), nullable=False),
        sa.Column("submittable", sa.Boolean(), nullable=True),
        sa.Column("metric_name", sa.String(128), nullable=True),
        sa.Column("metric_value", sa.Float(), nullable=True),
        sa.Column("metric_unit", sa.String(32), nullable=True),
        sa.Column("accuracy_name", sa.String(128), nullable=True),
        sa.Column("accuracy_value", sa.Float(), nullable=True),
        sa.Column("accuracy_text", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("root", "folder", name="uq_runs_root_folder"),
    )
    op.create_index("ix_runs_query", "runs", ["benchmark", "scenario", "mode", "system"])
    op.create_table(
        "metrics",
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("value", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("metrics")
    op.drop_index("ix_runs_query", table_name="runs")
    op.drop_table("runs")
