"""qwen3-vl-235b-a22b task: the catalogue's official parquet layout, the reference's chat prompt, the accuracy
byte-identical to the official evaluation.py on a non-oracle log, and the oracle's f1 of exactly 1.0 through the
chat path in Offline and Server (accuracy mode), on the full catalogue and the Interactive subset.

``tests/fixtures/qwen3_vl/``: an 8-row synthetic catalogue (``mlharness dataset synth qwen3-vl``), a log of
hand-perturbed answers (``make_log.py``: a deeper wrong category, a brand typo, a missing field, malformed JSON,
a fenced answer, a lax boolean with a short category, an extra field, a repeated sample, padded spaces and upper
case), ``accuracy.txt`` and ``official_eval.log`` written by the official ``run_evaluation`` on them
(``official_driver.py`` says how), and ``official_prompts.json``, the official ``formulate_loaded_sample`` of
every row (``official_prompt.py``).
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.helpers.cli import cli

pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("rapidfuzz")
pytest.importorskip("sklearn")

FIXTURES = Path(__file__).parent / "fixtures" / "qwen3_vl"
CATALOGUE = FIXTURES / "catalogue"


def _official_table() -> dict[str, list[float]]:
    """The two rows of the official results table (accuracy file, random selection), from its log."""
    rows = {}
    for line in (FIXTURES / "official_eval.log").read_text().splitlines():
        m = re.match(r"│ (From accuracy file|Random selection)\s*│(.*)│\s*$", line)
        if m:
            rows[m.group(1)] = [float(x) for x in m.group(2).split("│")]
    return rows


def test_synth_writes_the_official_layout(env, tmp_path):
    out = tmp_path / "cat"
    proc = cli(env, "dataset", "synth", "qwen3-vl", "--out", str(out), "--count", "5")
    assert proc.returncode == 0, proc.stderr
    train, test = out / "data" / "train-00000-of-00001.parquet", out / "data" / "test-00000-of-00001.parquet"
    assert pq.read_metadata(train).num_rows == 4 and pq.read_metadata(test).num_rows == 1
    schema = pq.read_schema(train)
    assert schema.names == ["product_image", "product_title", "product_description", "potential_product_categories",
                            "ground_truth_category", "ground_truth_brand", "ground_truth_is_secondhand"]
    assert str(schema.field("product_image").type) == "struct<bytes: binary, path: string>"
    features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert features["product_image"] == {"_type": "Image"}  # what load_dataset decodes as an image
    row = pq.read_table(train).slice(0, 1).to_pylist()[0]
    assert row["ground_truth_category"] in row["potential_product_categories"]
    from PIL import Image

    assert Image.open(io.BytesIO(row["product_image"]["bytes"])).format in ("PNG", "JPEG")
    proc = cli(env, "dataset", "synth", "qwen3-vl", "--out", str(tmp_path / "8k"), "--interactive")
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (tmp_path / "8k" / "data").iterdir()] == ["train-00000-of-00001.parquet"]


def test_prompt_is_the_reference_prompt():
    """Every message of every row as the official formulate_loaded_sample builds it; the image is the data
    file's own bytes (the reference re-saves it with PIL: the same pixels for a PNG)."""
    from PIL import Image

    from mlharness.predictors.chat import parse_chat
    from mlharness.tasks.qwen3_vl.dataset import CatalogueData
    from mlharness.tasks.qwen3_vl.hooks import Catalogue

    official = json.loads((FIXTURES / "official_prompts.json").read_text())
    data = CatalogueData(CATALOGUE)
    assert len(data) == len(official) == 8
    for i, ref in enumerate(official):
        ours = Catalogue(data).prompt(i)["messages"]
        assert ours[0] == ref["messages"][0]  # the system prompt with the ProductMetadata schema
        assert ours[1]["content"][0] == ref["messages"][1]["content"][0]  # title, description, candidates
        url, ref_url = ours[1]["content"][1]["image_url"]["url"], ref["messages"][1]["content"][1]["image_url"]["url"]
        assert url.split(",")[0] == ref_url.split(",")[0]  # data:image/PNG;base64 (PIL's format name)
        assert base64.b64decode(url.split(",")[1]) == data.image_bytes(i)
        if url.startswith("data:image/PNG"):
            def pixels(u):
                return Image.open(io.BytesIO(base64.b64decode(u.split(",")[1]))).convert("RGB").tobytes()
            assert pixels(url) == pixels(ref_url)
        prompt = parse_chat(Catalogue(data).prompt(i), i)
        assert prompt.images[0].data == data.image_bytes(i) and prompt.extra == {}


def test_accuracy_is_byte_identical_to_the_official_script(env, tmp_path):
    log = FIXTURES / "mlperf_log_accuracy.json"
    proc = cli(env, "accuracy", "qwen3-vl", "--log", str(log), "--dataset-path", str(CATALOGUE))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (FIXTURES / "accuracy.txt").read_text()


def test_other_scores_match_the_official_table():
    """Brand, is_secondhand and the random baselines as the official table printed them, with its chunking (the
    fixture was made with os.cpu_count() 2: two chunks). The random brand baseline draws from a set of strings,
    whose order follows the process's hash seed, so it is left out."""
    from mlharness.tasks.qwen3_vl.metric import score_log

    log_head = (FIXTURES / "official_eval.log").read_text().splitlines()[0]
    jobs = min(int(log_head.split("=")[1]), 4)
    d = score_log(FIXTURES / "mlperf_log_accuracy.json", CATALOGUE, jobs=jobs).details
    table = _official_table()
    assert d["unparsable_responses"] == 4
    ours = [d["category_f1"], d["brand_f1"], d["is_secondhand_f1"]]
    assert [round(x, 6) for x in ours] == [round(x, 6) for x in table["From accuracy file"]]
    assert round(d["random_category_f1"], 6) == round(table["Random selection"][0], 6)
    assert round(d["random_is_secondhand_f1"], 6) == round(table["Random selection"][2], 6)


def test_accuracy_log_that_is_not_text_is_refused(env, tmp_path):
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps([{"seq_id": 0, "qsl_idx": 0, "data": "FFFE"}]))
    proc = cli(env, "accuracy", "qwen3-vl", "--log", str(log), "--dataset-path", str(CATALOGUE))
    assert proc.returncode != 0 and "entry 0" in proc.stderr and "UTF-8" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_oracle_table_keys_every_prompt_to_its_ground_truth(tmp_path):
    from mlharness.predictors.chat import parse_chat
    from mlharness.tasks.qwen3_vl.dataset import CatalogueData
    from mlharness.tasks.qwen3_vl.hooks import Catalogue
    from mlharness.tasks.qwen3_vl.models import oracle_table

    table = oracle_table(CATALOGUE)
    data = CatalogueData(CATALOGUE)
    assert len(table["chat"]) == len(data)
    for i in range(len(data)):
        answer = json.loads(table["chat"][parse_chat(Catalogue(data).prompt(i), i).key])
        row = data.row(i)
        assert answer == {"category": row["ground_truth_category"], "brand": row["ground_truth_brand"],
                          "is_secondhand": row["ground_truth_is_secondhand"]}


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_oracle_scores_exactly_its_maximum(env, tmp_path, scenario):
    out = tmp_path / "acc"
    proc = cli(env, "run", "--manifest", "qwen3-vl-235b-a22b-oracle", "--scenario", scenario, "--mode", "accuracy",
               "--output", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = (out / "accuracy.txt").read_text()
    assert text.splitlines()[2] == '{"f1": 1.0}', text
    # the log holds each answer as UTF-8 text, what evaluation.py decodes
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert all(json.loads(bytes.fromhex(e["data"]).decode("utf-8")).keys() == {"category", "brand", "is_secondhand"}
               for e in entries)


def test_oracle_on_the_interactive_subset_and_interactive_refused(env, tmp_path):
    out = tmp_path / "acc8k"
    proc = cli(env, "run", "--manifest", "qwen3-vl-235b-a22b-oracle", "--dataset", "qwen3_vl_8k", "--scenario",
               "Offline", "--mode", "accuracy", "--output", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert '{"f1": 1.0}' in (out / "accuracy.txt").read_text()
    assert len(json.loads((out / "mlperf_log_accuracy.json").read_text())) == 6  # the subset's own rows
    # mlperf.conf has no qwen3-vl-235b-a22b-interactive settings: refused before anything runs, not run as Server
    proc = cli(env, "run", "--manifest", "qwen3-vl-235b-a22b-oracle", "--scenario", "Interactive", "--mode",
               "accuracy", "--output", str(tmp_path / "inter"))
    assert proc.returncode == 2 and "qwen3-vl-235b-a22b-interactive" in proc.stderr, proc.stderr
    assert "Run --scenario Server" in proc.stderr, proc.stderr
    assert not (tmp_path / "inter").exists()


def test_a_catalogue_without_splits_is_refused_naming_the_folder(env, tmp_path):
    (tmp_path / "data").mkdir()
    shutil.copy(CATALOGUE / "data" / "train-00000-of-00001.parquet", tmp_path / "data" / "validation.parquet")
    proc = cli(env, "run", "--manifest", "qwen3-vl-235b-a22b-oracle", "--dataset-path", str(tmp_path), "--scenario",
               "Offline", "--mode", "accuracy", "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and "train-*.parquet" in proc.stderr and str(tmp_path) in proc.stderr, proc.stderr


@pytest.mark.timing
@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_random_qwen3_vl_generates_text_through_its_processor(env, tmp_path, scenario):
    """The tiny random Qwen3-VL (transformers, its own processor and chat template) answers the reference's chat
    prompts with images. The default command with only --min-duration-ms is VALID in both scenarios: calibration
    plans the Server rate against the 12 s end-to-end bound (token latencies are off for this benchmark), and
    LoadGen counts samples, not tokens."""
    pytest.importorskip("torch")
    out = tmp_path / scenario
    proc = cli(env, "run", "--manifest", "qwen3-vl-235b-a22b-random", "--scenario", scenario, "--mode",
               "performance", "--output", str(out), "--no-progress", "--min-duration-ms", "1000")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert "first token" not in summary.lower(), summary
    assert re.search(r"^Result is : VALID", summary, re.M), summary
    metadata = json.loads((out / "mlharness_run.json").read_text())
    assert metadata["result"]["metric_unit"] == "samples/s", metadata["result"]
    if scenario == "Server":
        assert re.search(r"^target_latency \(ns\): 12000000000", summary, re.M), summary
        assert metadata["calibration"]["extra"]["end_to_end"] is True, metadata["calibration"]
        assert "end to end against the bound 12000 ms" in proc.stdout + proc.stderr, proc.stderr


def test_token_latencies_follow_the_rounds_conf_but_not_a_user_conf(tmp_path):
    """mlperf.conf turns qwen3-vl-235b-a22b's token latencies off (its bound is end to end): a token-stream run of
    it follows that; a user.conf turning them off for another token-stream benchmark is still refused."""
    from mlharness.errors import SettingsError
    from mlharness.loadgen import settings as lgs

    def plan(model, user_conf=None):
        return lgs.SettingsPlan(model=model, official=True, scenario="Server", mode="performance",
                                user_conf=user_conf, overrides=lgs.Overrides(), audit_config=None,
                                token_latencies=True)

    s = lgs.build_test_settings(plan("qwen3-vl-235b-a22b"))
    assert not s.use_token_latencies and s.server_target_latency_ns == 12_000_000_000
    conf = tmp_path / "user.conf"
    conf.write_text("llama3_1-8b.Server.use_token_latencies = 0\n")
    with pytest.raises(SettingsError, match="turns use_token_latencies off"):
        lgs.build_test_settings(plan("llama3_1-8b", conf))
