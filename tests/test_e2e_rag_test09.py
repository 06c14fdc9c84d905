"""TEST09 for e2e-rag-qna: the official audit.config, and mlharness's verdict and verify_output_len.txt equal to
the official run_verification.py's on the oracle's log (TEST PASS) and on a log of cut answers (TEST FAIL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlharness.paths import AUDIT_DIR
from mlharness.submission import test09
from mlharness.submission.test07 import audit_config_for

FIX = Path(__file__).parent / "fixtures" / "e2e_rag" / "test09"


def test_the_audit_config_is_the_official_one_with_its_bounds():
    config = audit_config_for("TEST09", "e2e-rag-qna")
    assert config == AUDIT_DIR / "TEST09" / "e2e-rag-qna" / "audit.config"
    assert test09.audit_values(config, "test09_") == {"test09_min_output_tokens": 246.43,
                                                      "test09_max_output_tokens": 301.19}
    assert "*.*.min_query_count = 824" in config.read_text()


@pytest.mark.parametrize(("case", "passed"), [("oracle", True), ("cut", False)])
def test_verdict_and_verify_file_match_the_official_script(case, passed):
    result = test09.verify(FIX / case / "mlperf_log_accuracy.json", audit_config_for("TEST09", "e2e-rag-qna"))
    assert result.passed is passed
    assert result.text() == (FIX / case / "verify_output_len.txt").read_text()
    official = (FIX / case / "stdout.txt").read_text()
    assert f"Overall: {'TEST PASS' if passed else 'TEST FAIL'}" in official
