"""An audit's own performance run (TEST01's, TEST04's) sized by the performance run's calibrated user.conf, which
a faster host ends before min_duration (an Offline query too small): ``submission run`` repeats the audit with the
explained fix added to a copy of that user.conf (mlharness.submission.sizing.resize_audit), as it does the
performance run; a fix that would change a Server audit's rate is not applied. Real LoadGen runs of the demo."""

from __future__ import annotations

from pathlib import Path

from mlharness.calibration.explain import Explanation, Fix
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import parse_summary
from mlharness.run.options import RunOptions
from mlharness.run.runner import run
from mlharness.submission import sizing
from mlharness.submission.layout import Tree

IDS = ("box", "demo", "Offline")


def _audit_run(out: Path, conf: Path) -> None:
    run(RunOptions(scenario="Offline", mode="performance", output=out, count=64, user_conf=conf,
                   overrides=lgs.Overrides(min_duration_ms=300)))


def test_an_audit_run_too_small_for_min_duration_is_resized_and_run_again(tmp_path, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    tree = Tree(tmp_path / "results")
    folder = tree.scenario_dir(*IDS) / "TEST01" / "performance" / "run_1"
    tree.record_dir(*IDS, "TEST01").mkdir(parents=True)
    conf = tmp_path / "performance.user.conf"
    conf.write_text("demo.Offline.target_qps = 20\n")  # what a slow performance run calibrated: 6 samples a query
    _audit_run(folder, conf)
    assert not parse_summary(folder / "mlperf_log_summary.txt", "Offline").valid
    assert sizing.audit_verdict(tree, IDS, "TEST01", "demo").failed == ["min duration"]
    said, confs = [], []

    def rerun(c: Path) -> None:
        confs.append(c)
        _audit_run(folder, c)

    sizing.resize_audit(tree, IDS, "TEST01", "demo", conf, rerun, said.append)
    assert confs and confs[0].name == "performance.user.TEST01.retry1.conf"
    assert confs[0].read_text().startswith(conf.read_text())  # the performance run's lines, then the fix
    assert "demo.Offline.target_qps = " in confs[0].read_text().splitlines()[-1]
    assert said[0].startswith("demo/Offline TEST01 performance INVALID (min duration not met): again with --target-qps")
    assert parse_summary(folder / "mlperf_log_summary.txt", "Offline").valid
    assert conf.read_text() == "demo.Offline.target_qps = 20\n"  # the performance run's user.conf is untouched


def test_only_fixes_that_size_a_run_without_changing_its_rate_are_applied():
    rate = Fix("--target-qps 40", "demo.Server.target_qps = 40")
    count = Fix("--min-query-count 900", "demo.Server.min_query_count = 900")
    assert not sizing.audit_resizable(Explanation(False, ["min duration"], fixes=[rate]), "Server")
    assert sizing.audit_resizable(Explanation(False, ["early stopping"], fixes=[count]), "Server")
    assert sizing.audit_resizable(Explanation(False, ["min duration"], fixes=[rate]), "Offline")
    # over its latency bound: the rate itself is wrong, which no resize of an audit fixes
    assert not sizing.audit_resizable(Explanation(False, ["latency bound"], fixes=[rate]), "Offline")
    assert not sizing.audit_resizable(Explanation(True), "Offline")
    # an audit without a performance run of its own is left alone
    sizing.resize_audit(Tree(Path("/nonexistent")), IDS, "TEST06", "demo", Path("c"), None, None)
