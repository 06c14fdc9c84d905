"""Every LoadGen setting and thread, batch or sample count is checked for type and range before LoadGen or a
framework sees it, whether it comes from a flag, a user.conf or audit config line, or a manifest field: exit
status 2 and a message naming the flag, the file and line, or the manifest and field. user.conf and audit config
files are read only when they are regular UTF-8 files of at most 1 MiB.

Without these checks the values below crash LoadGen natively (a samples_per_query or expected latency of 0, a
min_query_count of -1), hang the run, end in a traceback (NaN, inf) or are silently misread ('1e30' read as 1).
Each case runs the real CLI in-process and is refused before any model loads.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

from mlharness.cli import main
from mlharness.loadgen import bounds
from mlharness.loadgen import settings as lgs
from tests.helpers.unix_socket import socket_file

FIFO = "<fifo>"  # a file spec: make a FIFO there
FOLDER = "<folder>"  # a file spec: make a folder there
SOCKET = "<socket>"  # a file spec: bind a Unix socket there
HUGE = 2 << 30  # a file spec (an int): a sparse file of that many bytes


class HostileCase(NamedTuple):
    """One command line that must be refused. ``{dir}`` in ``argv`` and ``message`` stands for a scratch folder
    that holds ``files`` (name, spec): text, bytes, or FIFO / FOLDER / SOCKET / an int size (sparse file)."""

    argv: tuple[str, ...]
    exit: int
    message: str
    files: tuple[tuple[str, object], ...] = ()
    id: str = ""

    def prepare(self, folder: Path) -> tuple[list[str], str]:
        """Make the files in ``folder``; the argv and message with ``{dir}`` replaced."""
        for name, spec in self.files:
            path = folder / name
            if spec == FIFO:
                os.mkfifo(path)
            elif spec == FOLDER:
                path.mkdir()
            elif spec == SOCKET:
                socket_file(path)
            elif isinstance(spec, int):
                with open(path, "wb") as f:
                    f.truncate(spec)
            elif isinstance(spec, bytes):
                path.write_bytes(spec)
            else:
                path.write_text(str(spec))
        return [a.replace("{dir}", str(folder)) for a in self.argv], self.message.replace("{dir}", str(folder))


ECHO = textwrap.dedent("""\
    name: echotest
    framework:
      name: {framework}
    {options}
    inputs:
      - name: x
        shape: [4]
    outputs:
      - name: y
    model:
      graph_path: none.bin
    dataset:
      name: inline
      init: |
        def init(count):
            return count or 8
      {dataset_extra}
    batching:
      max_batchsize: {batch}
      server_max_wait_ms: {wait}
    preprocess: |
      import numpy as np
      def preprocess(ctx, index):
          return np.full((4,), index, np.float32)
    postprocess: |
      def postprocess(ctx, outputs):
          return outputs[0][:, 0]
    """)


def echo(framework: str = "echo", options: str = "", dataset_extra: str = "", batch: object = 8,
         wait: object = 0.0) -> str:
    """A framework-free manifest (the echo predictor) with one field set as given."""
    return ECHO.format(framework=framework, options=options, dataset_extra=dataset_extra, batch=batch, wait=wait)


def run(*args: str, scenario: str = "Offline", mode: str = "performance") -> tuple[str, ...]:
    return ("run", "--scenario", scenario, "--mode", mode, "--no-progress", "--output", "{dir}/out", *args)


def conf(*lines: str, scenario: str = "SingleStream", name: str = "user.conf", id: str = "") -> HostileCase:
    """A user.conf whose last line is refused; the message names the file and that line."""
    text = "# a system's settings\n" + "".join(f"{line}\n" for line in lines)
    return HostileCase(run("--user-conf", f"{{dir}}/{name}", scenario=scenario), 2,
                       f"{{dir}}/{name}, line {len(lines) + 1}: '{lines[-1]}'", ((name, text),), id)


def flag(name: str, value: str, message: str, scenario: str = "Offline") -> HostileCase:
    return HostileCase(run(name, value, scenario=scenario), 2, f"{name}: {message}",
                       id=f"{name.lstrip('-')}={value}")


def manifest(text: str, field: str, message: str, id: str) -> HostileCase:
    files = (("m.yaml", text), ("none.bin", ""))
    return HostileCase(run("--manifest", "{dir}/m.yaml"), 2, f"{{dir}}/m.yaml: field '{field}': {message}", files, id)


def conf_file(spec: object, message: str, id: str, option: str = "--user-conf", what: str = "user.conf"
              ) -> HostileCase:
    return HostileCase(run(option, "{dir}/given.conf"), 2, f"cannot read {what} {{dir}}/given.conf: {message}",
                       (("given.conf", spec),), id)


SUBMISSION = ("submission", "run", "--scenarios", "Offline", "--division", "open", "--submitter", "Acme",
              "--results", "{dir}/results")
TUNE = ("tune", "--scenario", "Offline", "--output", "{dir}/tuned.conf")

HOSTILE_SETTINGS_CASES: list[HostileCase] = [
    # ---- LoadGen settings from flags
    flag("--target-qps", "0", "must be > 0, got 0"),
    flag("--target-qps", "-5", "must be > 0, got -5"),
    flag("--target-qps", "nan", "must be a finite number, got nan"),
    flag("--target-qps", "inf", "must be a finite number, got inf"),
    flag("--target-qps", "1e12", "must be <= 100000000, got 1000000000000"),
    flag("--target-latency-ms", "0", "must be > 0 ms, got 0", "SingleStream"),
    flag("--target-latency-ms", "-1", "must be > 0 ms, got -1", "Server"),
    flag("--target-latency-ms", "nan", "must be a finite number, got nan", "SingleStream"),
    flag("--target-latency-ms", "1e300", "must be <= 10000000 ms", "MultiStream"),
    flag("--min-query-count", "-1", "must be >= 0, got -1"),
    flag("--min-query-count", str(10**30), f"must be <= 1000000000, got {10**30}"),
    flag("--max-query-count", "-3", "must be >= 0, got -3 (0: no limit)"),
    flag("--min-duration-ms", "-1", "must be >= 0 ms, got -1"),
    flag("--min-duration-ms", str(2**64), "must be <= 1000000000 ms"),
    flag("--samples-per-query", "0", "must be >= 1, got 0", "MultiStream"),
    flag("--performance-sample-count", "0", "must be >= 1, got 0"),
    flag("--performance-sample-count", str(10**12), "must be <= 100000000"),
    # ---- run execution flags
    flag("--count", "0", "must be >= 1, got 0"),
    flag("--count", "-4", "must be >= 1, got -4"),
    flag("--instances", "0", "must be >= 1, got 0"),
    flag("--instances", "1000", "must be <= 256, got 1000"),
    flag("--workers", "0", "must be >= 1, got 0"),
    flag("--threads", "0", "must be >= 1, got 0"),
    flag("--threads", "100000", "must be <= 1024, got 100000"),
    flag("--threads-per-instance", "0", "must be >= 1, got 0"),
    flag("--load-workers", "-1", "must be >= 0, got -1"),
    flag("--max-batchsize", "0", "must be >= 1, got 0"),
    flag("--max-batchsize", str(10**9), "must be <= 1048576"),
    flag("--server-max-wait-ms", "-1", "must be >= 0 ms, got -1", "Server"),
    flag("--server-max-wait-ms", "nan", "must be a finite number, got nan", "Server"),
    flag("--telemetry-interval-ms", "1", "must be >= 10 ms (or 0), got 1"),
    flag("--telemetry-interval-ms", "inf", "must be a finite number, got inf"),
    flag("--device", "tpu:7", "expected cpu, cuda or cuda:N"),
    flag("--device", "cuda:x", "expected cpu, cuda or cuda:N"),
    flag("--device", "CPU", "expected cpu, cuda or cuda:N"),
    # ---- user.conf values: the file and line are named
    conf("*.SingleStream.target_latency = 0", id="conf-singlestream-latency-0"),
    conf("*.MultiStream.target_latency = -2", scenario="MultiStream", id="conf-multistream-latency-negative"),
    conf("*.Server.target_latency = -5", scenario="Server", id="conf-server-latency-negative"),
    conf("*.Server.target_latency = 2.5", scenario="Server", id="conf-server-latency-fraction"),
    conf("*.*.target_latency = 0.5", id="conf-star-latency-fraction"),
    conf("*.*.min_query_count = 10", "*.*.min_query_count = -1", id="conf-min-query-count-negative"),
    conf("*.*.min_query_count = 1e30", id="conf-min-query-count-1e30"),
    conf("*.*.max_query_count = 010", id="conf-octal"),
    conf("*.*.max_duration = 99999999999", id="conf-max-duration-huge"),
    conf("*.MultiStream.samples_per_query = 0", scenario="MultiStream", id="conf-samples-per-query-0"),
    conf("*.*.target_latency_percentile = 2", id="conf-percentile-2"),
    conf("*.*.target_latency_percentile = 0.99", id="conf-percentile-fraction"),
    conf("*.*.target_latency_percentile = 101", id="conf-percentile-101"),
    conf("*.*.performance_sample_count_override = 1000000000000", id="conf-performance-sample-count-huge"),
    conf("*.Offline.target_qps = nan", scenario="Offline", id="conf-qps-nan"),
    conf("*.Offline.target_qps = inf", scenario="Offline", id="conf-qps-inf"),
    conf("*.Server.target_qps = 0", scenario="Server", id="conf-qps-0"),
    conf("*.Server.coalesce_queries = 2", scenario="Server", id="conf-flag-2"),
    conf("*.Server.ttft_latency = 0", scenario="Server", id="conf-ttft-0"),
    # ---- audit config values
    HostileCase(run("--audit-config", "{dir}/audit.config"), 2,
                "{dir}/audit.config, line 2: '*.*.min_query_count = -1': min_query_count must be >= 0, got -1",
                (("audit.config", "*.*.mode = 2\n*.*.min_query_count = -1\n"),), "audit-min-query-count-negative"),
    HostileCase(run("--audit-config", "{dir}/audit.config"), 2,
                "{dir}/audit.config, line 1: '*.*.test05 = 2': test05 must be <= 1, got 2",
                (("audit.config", "*.*.test05 = 2\n"),), "audit-test05-2"),
    # ---- user.conf and audit config files: what they are, how large, how encoded
    conf_file(FIFO, "is a FIFO, not a regular file", "user-conf-fifo"),
    conf_file(FOLDER, "is a folder, not a regular file", "user-conf-folder"),
    conf_file(SOCKET, "is a socket, not a regular file", "user-conf-socket"),
    conf_file(HUGE, "is larger than 1 MiB", "user-conf-huge"),
    conf_file(b"# fine\n*.Offline.target_qps = 5 # \xff\xfe\n", "is not UTF-8 text: byte 0xff at line 2",
              "user-conf-not-utf8"),
    HostileCase(run("--user-conf", "{dir}/missing.conf"), 2, "cannot read user.conf {dir}/missing.conf: does not exist",
                id="user-conf-missing"),
    conf_file(FIFO, "is a FIFO, not a regular file", "audit-config-fifo", "--audit-config", "audit config"),
    conf_file(HUGE, "is larger than 1 MiB", "audit-config-huge", "--audit-config", "audit config"),
    conf_file(b"*.*.mode = 2\xc3\x28\n", "is not UTF-8 text: byte 0xc3 at line 1", "audit-config-not-utf8",
              "--audit-config", "audit config"),
    # ---- manifest fields: the manifest file and the field are named
    manifest(echo("onnxruntime", "  options:\n    intra_op_num_threads: 100000"),
             "framework.options.intra_op_num_threads", "must be <= 1024, got 100000", "manifest-intra-op-threads"),
    manifest(echo("onnxruntime", "  options:\n    inter_op_num_threads: -1"),
             "framework.options.inter_op_num_threads", "must be >= 0, got -1", "manifest-inter-op-threads"),
    manifest(echo(options="  options:\n    intra_op_num_threads: '8'"),
             "framework.options.intra_op_num_threads", "must be a whole number, got '8'", "manifest-threads-text"),
    manifest(echo(options=f"  warmup: {10**12}"), "framework.warmup", f"must be <= 10000, got {10**12}",
             "manifest-warmup"),
    manifest(echo(batch=10**9), "batching.max_batchsize", "must be <= 1048576, got 1000000000", "manifest-batch"),
    manifest(echo(wait=".inf"), "batching.server_max_wait_ms", "must be a finite number, got inf",
             "manifest-wait-inf"),
    manifest(echo(dataset_extra="load_workers: 100000"), "load_workers", "must be <= 1024, got 100000",
             "manifest-load-workers"),
    # ---- tune and submission run check the same flags before their first run
    HostileCase((*TUNE, "--instances", "1", "0"), 2, "--instances: must be >= 1, got 0", id="tune-instances-0"),
    HostileCase((*TUNE, "--batch-sizes", "0"), 2, "--batch-sizes: must be >= 1, got 0", id="tune-batch-0"),
    HostileCase((*TUNE, "--seconds", "nan"), 2, "--seconds: must be a finite number, got nan", id="tune-seconds"),
    HostileCase((*TUNE, "--target-latency-ms", "0"), 2, "--target-latency-ms: must be > 0 ms, got 0",
                id="tune-latency-0"),
    HostileCase((*SUBMISSION, "--target-qps", "0"), 2, "--target-qps: must be > 0, got 0", id="submission-qps-0"),
    HostileCase((*SUBMISSION, "--device", "tpu:7"), 2, "--device: expected cpu, cuda or cuda:N",
                id="submission-device"),
    HostileCase((*SUBMISSION, "--count", "0"), 2, "--count: must be >= 1, got 0", id="submission-count-0"),
    HostileCase((*SUBMISSION, "--user-conf", "{dir}/user.conf"), 2,
                "{dir}/user.conf, line 1: '*.MultiStream.samples_per_query = 0'",
                (("user.conf", "*.MultiStream.samples_per_query = 0\n"),), "submission-user-conf"),
    HostileCase((*SUBMISSION, "--user-conf", "{dir}/fifo"), 2, "cannot read user.conf {dir}/fifo: is a FIFO",
                (("fifo", FIFO),), "submission-user-conf-fifo"),
]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MLHARNESS_DEMO_DIR", str(tmp_path / "demo"))


def cli(argv: list[str]) -> int:
    """``mlharness ARGV`` in this process; its exit status."""
    try:
        return main(argv)
    except SystemExit as e:  # argparse's own errors
        return int(e.code or 0)


@pytest.mark.parametrize("case", HOSTILE_SETTINGS_CASES, ids=lambda c: c.id)
def test_hostile_setting_is_refused_naming_its_source(case, tmp_path, capsys):
    argv, message = case.prepare(tmp_path)
    status = cli(argv)
    err = capsys.readouterr().err
    assert status == case.exit, err
    assert message in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "results").exists()  # nothing ran


def test_cases_have_unique_ids():
    ids = [c.id for c in HOSTILE_SETTINGS_CASES]
    assert len(ids) == len(set(ids)) and all(ids)
    assert len(HOSTILE_SETTINGS_CASES) >= 80


def test_user_conf_errors_explain_what_loadgen_would_read(tmp_path, capsys):
    for line, needle in [("*.*.min_query_count = 1e30", "LoadGen reads '1e30' as 1"),
                         ("*.*.max_query_count = 010", "LoadGen reads it as octal (8)"),
                         ("*.*.target_latency_percentile = 0.99", "a percent: 99 means the 99th percentile")]:
        path = tmp_path / "user.conf"
        path.write_text(line + "\n")
        assert cli([*run("--user-conf", str(path))]) == 2
        assert needle in capsys.readouterr().err


def test_every_embedded_and_packaged_conf_value_is_in_range():
    """The bounds accept what LoadGen's own mlperf.conf, the package's user.conf files and audit configs hold."""
    for _, _, s, k, v in lgs.parse_conf(lgs.embedded_mlperf_conf(), "mlperf.conf"):
        assert bounds.conf_value_problem(k, s, v) is None, (s, k, v)
    from mlharness.paths import AUDIT_DIR, USER_CONF_DIR

    for path in [*USER_CONF_DIR.glob("*.conf"), *AUDIT_DIR.rglob("*.config")]:
        lgs.check_conf_values(path, lgs.parse_conf(lgs.read_conf(path), str(path)))


def test_ordinary_values_still_run(tmp_path, capsys):
    """A run with ordinary values at every bounded flag and a user.conf and audit config of ordinary lines."""
    (tmp_path / "none.bin").write_bytes(b"")
    (tmp_path / "m.yaml").write_text(echo(options="  warmup: 2", dataset_extra="load_workers: 2"))
    user_conf = tmp_path / "user.conf"
    user_conf.write_text("*.Offline.target_qps = 500\n*.*.target_latency_percentile = 99\n"
                         "*.SingleStream.target_latency = 0.5\n*.Server.target_latency = 0\n*.*.max_query_count = 0\n"
                         "*.*.performance_sample_count_override = 0x8\n")
    audit = tmp_path / "audit.config"
    audit.write_text("*.*.mode = 2\n*.*.accuracy_log_rng_seed = 720381539243781796\n"
                     "*.*.accuracy_log_sampling_target = 8\n")
    out = tmp_path / "o"
    status = cli(["run", "--manifest", str(tmp_path / "m.yaml"), "--scenario", "Offline", "--mode", "performance",
                  "--count", "8", "--min-duration-ms", "50", "--min-query-count", "8", "--max-batchsize", "4",
                  "--threads", "1", "--instances", "1", "--workers", "1", "--load-workers", "0",
                  "--server-max-wait-ms", "0.5", "--telemetry-interval-ms", "0", "--device", "cpu",
                  "--user-conf", str(user_conf), "--audit-config", str(audit), "--no-progress", "--output", str(out)])
    err = capsys.readouterr().err
    assert status == 0, err
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["settings"]["offline_expected_qps"] == 500.0
    assert meta["settings"]["performance_sample_count_override"] == 8
