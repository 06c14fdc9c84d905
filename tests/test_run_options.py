"""Every command that runs LoadGen (``run``, ``sweep``, ``submission run``, ``tune``, ``bench overhead|generate``)
takes the run's options from one definition (:mod:`mlharness.run.run_args`): a flag they share has the same
destination, default, type and help as on ``run`` (their declared overrides aside); old spellings still work and
say the new name; and ``sweep --endpoint URL`` sweeps an OpenAI-compatible server with no manifest."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from mlharness.cli import build_parser
from mlharness.run.run_args import ENDPOINT_MANIFEST, FLAG_NAMES

COMMANDS = {"run": ("run",), "sweep": ("sweep",), "tune": ("tune",), "bench overhead": ("bench", "overhead"),
            "bench generate": ("bench", "generate"), "submission run": ("submission", "run")}
# what a command changes of a shared flag, and why: its own default manifest or count, a --scenario with a
# default, a folder of another kind, or None where each run's own default applies
OVERRIDES = {
    ("sweep", "--scenario"): {"default", "required"},
    ("sweep", "--output"): {"help", "required"},
    ("bench overhead", "--manifest"): {"default", "help"}, ("bench overhead", "--count"): {"default"},
    ("bench generate", "--manifest"): {"default", "help"}, ("bench generate", "--count"): {"default"},
    ("submission run", "--manifest"): {"default", "help"}, ("submission run", "--device"): {"default"},
    ("submission run", "--workers"): {"default"}, ("submission run", "--round"): {"default"},
}
# a command's own flag spelled as a shared one, with another meaning (kept: renaming it would break scripts; the
# docs name them): tune's --instances are the counts it tries, its --output the user.conf it writes
OWN = {("tune", "--instances"), ("tune", "--output")}
EVERYWHERE = {"--manifest", "--dataset-path", "--count", "--min-duration-ms"}
# the flags `run` had before the definition moved (its --help must keep every one)
RUN_FLAGS = {
    "--manifest", "--framework", "--dataset", "--dataset-path", "--scenario", "--mode", "--output", "--results-root",
    "--system", "--user-conf", "--audit-config", "--device", "--round", "--count", "--min-duration-ms",
    "--min-query-count", "--max-query-count", "--target-qps", "--target-latency-ms", "--samples-per-query",
    "--performance-sample-count", "--max-batchsize", "--server-max-wait-ms", "--threads", "--workers",
    "--instances", "--threads-per-instance", "--pin-cores", "--load-workers", "--trace", "--loadgen-trace",
    "--telemetry-interval-ms", "--no-calibrate", "--no-second-try", "--ignore-framework-version", "--no-progress",
    "--agent", "--network", "--sut-server",
    "--token", "--tls-ca", "--tls-cert", "--tls-key", "--tls-server-name", "--endpoint",
}


def parser_of(path: tuple[str, ...]) -> argparse.ArgumentParser:
    p = build_parser()
    for name in path:
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = sub.choices[name]
    return p


def shared(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.option_strings[0]: a for a in p._actions if a.option_strings and a.option_strings[0] in FLAG_NAMES
            and a.help != argparse.SUPPRESS and not (a.help or "").startswith("deprecated")}


def test_run_keeps_every_flag_it_had():
    flags = {s for a in parser_of(("run",))._actions for s in a.option_strings} - {"-h", "--help"}
    assert flags == RUN_FLAGS


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "run"])
def test_a_shared_flag_means_the_same_on_every_command(command):
    reference = shared(parser_of(COMMANDS["run"]))
    mine = shared(parser_of(COMMANDS[command]))
    assert EVERYWHERE <= set(mine), EVERYWHERE - set(mine)
    for flag, action in mine.items():
        if (command, flag) in OWN:
            continue
        changed = OVERRIDES.get((command, flag), set())
        ref = reference[flag]
        assert action.dest == ref.dest and type(action) is type(ref), flag
        for attr in ("default", "help", "type", "nargs", "metavar", "choices", "required"):
            if attr not in changed:
                assert getattr(action, attr) == getattr(ref, attr), (command, flag, attr)
            elif attr == "default":
                assert getattr(action, attr) != getattr(ref, attr), (command, flag, "declared but unchanged")


def test_sweep_takes_what_a_run_against_a_server_needs():
    flags = set(shared(parser_of(("sweep",))))
    assert {"--endpoint", "--agent", "--framework", "--user-conf", "--no-progress", "--min-duration-ms",
            "--min-query-count", "--device", "--dataset"} <= flags


@pytest.mark.parametrize("command,extra", [(("sweep",), ["--output", "x"]), (("tune",), ["--scenario", "Offline"]),
                                           (("bench", "overhead"), []), (("bench", "generate"), [])])
def test_seconds_still_works_and_names_the_new_flag(command, extra, capsys):
    args = build_parser().parse_args([*command, "--seconds", "0.25", *extra])
    assert args.min_duration_ms == 250
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--seconds is deprecated: use --min-duration-ms" in err
    assert build_parser().parse_args([*command, *extra]).min_duration_ms is None  # each command's own default


def test_endpoint_without_manifest_is_a_generative_model():
    from mlharness.run.run_args import run_options

    args = build_parser().parse_args(["run", "--scenario", "Server", "--endpoint", "http://127.0.0.1:9"])
    opts = run_options(args)
    assert opts.manifest == ENDPOINT_MANIFEST and opts.endpoints == ["http://127.0.0.1:9"]
    assert run_options(build_parser().parse_args(["run", "--scenario", "Server"])).manifest == "demo"


def test_sweep_endpoint_runs_with_no_manifest(tmp_path, env):
    """`sweep --endpoint URL` against the fake OpenAI-compatible server on 127.0.0.1: one short point."""
    from tests.helpers.fake_openai import FakeOpenAI

    out = tmp_path / "sweep"
    with FakeOpenAI(tokens=4, delay_s=0.0) as server:
        proc = subprocess.run([sys.executable, "-m", "mlharness.cli", "sweep", "--endpoint", server.url, "--qps",
                               "40", "--min-query-count", "16", "--min-duration-ms", "100", "--count", "8",
                               "--no-progress", "--output", str(out)], capture_output=True, text=True,
                              timeout=240, env=env)
        stats = server.stats()
    assert proc.returncode == 0, proc.stderr + proc.stdout
    state = json.loads((out / "sweep.json").read_text())
    assert state["manifest"] == ENDPOINT_MANIFEST and state["options"]["endpoints"] == [server.url]
    (point,) = state["points"]
    meta = json.loads((out / point["dir"] / "mlharness_run.json").read_text())
    assert meta["framework"]["name"] == "openai"
    assert stats["requests"] >= point["samples"] >= 16  # the server answered every query of the point
    assert point["meaningful"] is False  # 16 queries: under the rules' minimum, said so
    assert "Traceback" not in proc.stderr
