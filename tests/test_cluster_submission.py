"""`submission run --cluster`: a submission's LoadGen tests run as jobs on a Ray cluster of three nodes on this
host (tests/helpers/ray_cluster.py: node a offers acc_a, b acc_b, c neither), each on a node its benchmark's
--constraints allow, each run naming its node; the tree gathered on the driver passes `submission check
--allow-development` as a tree made here does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from mlharness.submission.dispatch import parse_constraints
from tests.helpers.echo_manifest import echo_manifest
from tests.helpers.ray_cluster import ray_cluster  # noqa: F401 - the fixture

SYSTEM = "box"
OVERRIDES = {"status": "available", "system_type": "edge", "cooling": "air", "host_memory_configuration": "1x 24 GB",
             "host_networking_topology": "N/A", "host_storage_capacity": "256 GB", "host_storage_type": "SSD"}
TOY_PREDICT = """\
import time

def predict(ctx, run, inputs):
    time.sleep(0.003)
    return run(inputs)
"""


def cli(env: dict[str, str], *args: str, timeout: float = 200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_constraints_text_is_parsed_and_refused_by_key():
    c = parse_constraints("accelerator=GPU,accelerators=2,min_memory_gb=32,label.zone=a,framework.onnxruntime=>=1.2")
    assert (c.accelerator, c.accelerators, c.min_memory_gb) == ("GPU", 2.0, 32.0)
    assert c.labels == (("zone", "a"),) and c.frameworks == (("onnxruntime", ">=1.2"),)
    for bad in ("gpu=1", "accelerators=two", "accelerator"):
        try:
            parse_constraints(bad)
        except Exception as e:  # noqa: BLE001 - the error names what is wrong
            assert "--constraints" in str(e)
        else:
            raise AssertionError(bad)


@pytest.mark.slow
def test_two_benchmarks_land_on_the_nodes_their_constraints_allow_and_the_tree_passes_check(ray_cluster, tmp_path):  # noqa: F811
    env = ray_cluster.env(dict(os.environ))
    overrides = tmp_path / "system.yaml"
    overrides.write_text(yaml.safe_dump(OVERRIDES))
    results, package = tmp_path / "results", tmp_path / "package"
    benchmarks = {"alpha": ("acc_a", "a", ["Offline", "SingleStream"]), "beta": ("acc_b", "b", ["Offline"])}
    for name, (accelerator, _, scenarios) in benchmarks.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"{name}.yaml").write_text(echo_manifest(name, TOY_PREDICT))
        run = cli(env, "submission", "run", "--manifest", str(folder / f"{name}.yaml"), "--scenarios", *scenarios,
                  "--division", "open", "--submitter", "Acme", "--system-name", SYSTEM, "--results", str(results),
                  "--system-overrides", str(overrides), "--min-duration-ms", "200", "--min-query-count", "64",
                  "--target-latency-ms", "4", "--extra-tests", "TEST01", "--cluster", "auto", "--constraints", f"accelerator={accelerator}")
        assert run.returncode == 0, run.stdout + run.stderr
    for name, (_, node, scenarios) in benchmarks.items():
        records = sorted((results / ".mlharness" / "runs" / SYSTEM / name).glob("*/*/mlharness_run.json"))
        assert len(records) == 3 * len(scenarios)  # accuracy, performance, TEST01 per scenario
        for path in records:  # each run names its node: the one its benchmark's constraints allow
            md = json.loads(path.read_text())
            assert md["executor"]["backend"] == "ray", path
            assert md["executor"]["node_id"] == ray_cluster.node_id(node), path
            assert "$ " in (path.parent / "run.log").read_text() or (path.parent / "run.log").is_file()
    packed = cli(env, "submission", "package", "--results", str(results), "--out", str(package))
    assert packed.returncode == 0, packed.stdout + packed.stderr
    check = cli(env, "submission", "check", str(package), "--allow-development")
    assert check.returncode == 0 and "PASSED: 0 problem(s)" in check.stdout, check.stdout
    for name, (_, _, scenarios) in benchmarks.items():
        for scenario in scenarios:
            assert (package / "open" / "Acme" / "results" / SYSTEM / name / scenario / "performance" / "run_1" /
                    "mlperf_log_summary.txt").is_file()


def test_without_cluster_constraints_are_refused(tmp_path):
    run = cli(dict(os.environ), "submission", "run", "--manifest", "demo", "--scenarios", "Offline", "--division",
              "open", "--submitter", "Acme", "--results", str(tmp_path / "r"), "--constraints", "accelerator=GPU",
              timeout=60)
    assert run.returncode == 2 and "--cluster" in run.stderr, run.stderr
