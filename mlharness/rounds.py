"""The MLPerf Inference rounds mlharness can produce results for, as data.

A round fixes the three LoadGen seeds every submitted performance run must use; the official submission checker
(``tools/submission/submission_checker/constants.py``, ``MODEL_CONFIG[<round>]["seeds"]``, selected with its
``--version``) rejects a run whose detail log shows other ones. LoadGen compiles one round's seeds into its
binary (6.0.17: the v6.1 round's), so mlharness sets the chosen round's seeds explicitly on every run instead of
relying on the installed LoadGen.

A round also fixes its suite: the benchmark IDs (results folder names) its checker knows
(``MODEL_CONFIG[<round>]["models"]``). The checker of a round cannot read a benchmark the round does not have
(it fails on the tree), so a run made for a round refuses an MLPerf benchmark outside the round's suite.

The submission rules mlharness enforces for its benchmarks (accuracy targets, required scenarios, minimum
query counts, compliance tests) are the same in v6.0 and v6.1; they live in :mod:`mlharness.submission.rules`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlharness.errors import SettingsError, suggest

SEED_KEYS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")
# The official checker's TEST_DURATION_MS (the same in every round): a shorter performance run is an error in every
# division, open included.
MIN_DURATION_MS = 600_000
# Benchmarks the checker holds to no minimum duration (its min_duration_check returns early for them): the e2e-rag
# workloads run one fixed-size pass over their data set (min_query_count = its size; the reference's user.conf sets
# min_duration = 0).
NO_MIN_DURATION = frozenset({"e2e-rag-qna", "e2e-rag-db"})


@dataclass(frozen=True)
class Round:
    name: str  # also the official checker's --version
    seeds: dict[str, int]  # SEED_KEYS -> value
    benchmarks: frozenset[str]  # the benchmark IDs of the round's suite (MODEL_CONFIG[<round>]["models"])
    # TEST05's alternate seeds when the official constants list them for the round ("test05_seeds"); None:
    # LoadGen's embedded test05_* seeds apply (v6.0 and v6.1 list none).
    test05_seeds: dict[str, int] | None = None
    # Benchmarks whose results mlharness packages in the MLCommons endpoints client's layout for this round
    # (mlharness.submission.endpoints), which the round's checker reads as endpoints results: it skips LoadGen's
    # early stopping for them (performance_check.py latency_check: ``uses_early_stopping and not
    # self.is_endpoints``), with the minimum query count and performance sample count. mlharness's verdict on such a
    # run waives early stopping too (and nothing else): see :func:`early_stopping_waived`.
    endpoints_results: frozenset[str] = frozenset()


# The suites, from the checker's MODEL_CONFIG[<round>]["models"]. v6.1 dropped retinanet, pointpainting,
# mixtral-8x7b, llama3.1-405b and llama2-70b-99 and added qwen3.6-27b and the two e2e-rag benchmarks.
_V60_SUITE = frozenset({
    "resnet", "retinanet", "bert-99", "bert-99.9", "3d-unet-99", "3d-unet-99.9", "llama3.1-8b",
    "llama3.1-8b-edge", "llama2-70b-99", "llama2-70b-99.9", "stable-diffusion-xl", "mixtral-8x7b",
    "llama3.1-405b", "rgat", "pointpainting", "deepseek-r1", "whisper", "gpt-oss-120b", "wan-2.2-t2v-a14b",
    "qwen3-vl-235b-a22b", "dlrm-v3", "yolo-95", "yolo-99",
})  # fmt: skip
_V61_SUITE = frozenset({
    "resnet", "bert-99", "bert-99.9", "3d-unet-99", "3d-unet-99.9", "llama3.1-8b", "llama3.1-8b-edge",
    "llama2-70b-99.9", "stable-diffusion-xl", "rgat", "deepseek-r1", "whisper", "gpt-oss-120b",
    "wan-2.2-t2v-a14b", "qwen3-vl-235b-a22b", "qwen3.6-27b", "dlrm-v3", "yolo-95", "yolo-99", "e2e-rag-qna",
    "e2e-rag-db",
})  # fmt: skip

ROUNDS: dict[str, Round] = {
    r.name: r
    for r in (
        Round("v6.0", {"qsl_rng_seed": 2465351861681999779, "sample_index_rng_seed": 14276810075590677512,
                       "schedule_rng_seed": 3936089224930324775}, _V60_SUITE),
        Round("v6.1", {"qsl_rng_seed": 2085463073848966840, "sample_index_rng_seed": 2747215439041700203,
                       "schedule_rng_seed": 16159082839903944936}, _V61_SUITE,
              endpoints_results=frozenset({"qwen3.6-27b"})),
    )
}
# Every benchmark ID some known round has: a name outside it is no MLPerf benchmark (an open-division model).
MLPERF_BENCHMARKS = frozenset().union(*(r.benchmarks for r in ROUNDS.values()))
# The newest round the pinned LoadGen (6.0.17) was released for: its embedded mlperf.conf carries these seeds.
DEFAULT_ROUND = "v6.1"


def get_round(name: str | None) -> Round:
    """The round called ``name`` (None: :data:`DEFAULT_ROUND`); an unknown name is a SettingsError (exit 2)."""
    if name is None:
        return ROUNDS[DEFAULT_ROUND]
    if name not in ROUNDS:
        raise SettingsError(f"unknown MLPerf Inference round '{name}': mlharness knows the seeds and rules of "
                            f"these rounds only.{suggest(name, list(ROUNDS))}")
    return ROUNDS[name]


def rounds_with(benchmark: str) -> list[str]:
    """The known rounds whose suite has ``benchmark``, oldest first."""
    return [r.name for r in ROUNDS.values() if benchmark in r.benchmarks]


def check_in_suite(round_name: str | None, benchmark: str | None, where: str = "") -> None:
    """Refuse (SettingsError, exit 2) an MLPerf benchmark ID the round's suite does not have: that round's
    official checker cannot read its results. Names no round has (open-division models) pass."""
    r = get_round(round_name)
    if benchmark is None or benchmark not in MLPERF_BENCHMARKS or benchmark in r.benchmarks:
        return
    have = rounds_with(benchmark)
    which = f"rounds {', '.join(have)} have" if len(have) > 1 else f"round {have[0]} has"
    raise SettingsError(f"{where + ': ' if where else ''}{benchmark} is not a benchmark of MLPerf Inference "
                        f"round {r.name} (its official checker, --version {r.name}, cannot read its results); "
                        f"{which} it: pass --round {have[-1]}")


def early_stopping_waived(round_name: str | None, benchmark: str | None) -> bool:
    """Whether the round's checker waives LoadGen's early stopping for ``benchmark``'s results (an endpoints result
    of the round: the reference replays each recorded session once, far fewer queries than early stopping needs)."""
    return benchmark is not None and benchmark in get_round(round_name).endpoints_results


def round_of_seeds(seeds: dict[str, object]) -> str | None:
    """The round whose three seeds these are (values as read from a detail log), or None."""
    for r in ROUNDS.values():
        if all(seeds.get(k) == v for k, v in r.seeds.items()):
            return r.name
    return None


def wrong_seeds(r: Round, found: dict[str, object], test05: bool = False,
                embedded_test05: dict[str, int] | None = None) -> list[str]:
    """The official checker's message for each seed of ``found`` (keys SEED_KEYS) that is not the round's.
    TEST05 runs are held to the round's test05 seeds, else to ``embedded_test05`` (LoadGen's)."""
    expected = r.seeds
    if test05:
        expected = r.test05_seeds or {k: (embedded_test05 or {}).get(f"test05_{k}") for k in SEED_KEYS}
    return [f"{k} is wrong, expected={expected[k]}, found={found.get(k)}" for k in SEED_KEYS
            if found.get(k) != expected[k]]
