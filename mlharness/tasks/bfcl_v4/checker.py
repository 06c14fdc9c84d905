"""Run with the bfcl-eval environment's Python, not imported by mlharness: ``python -I checker.py IN.json OUT.json``.

bfcl-eval pins numpy 1.26.4 and filelock 3.20.0, so its AST checker runs in an environment of its own
(``MLHARNESS_BFCL_PYTHON``). IN holds the calls already converted the reference's way (``{"items": [{"functions",
"model_output", "possible_answer", "language", "test_category"}]}``); OUT gets one verdict per item (``{"valid",
"error", "error_type"}``) and bfcl-eval's version, the only thing mlharness reads back. The checker compares
parsed JSON values with the possible answers; nothing the model wrote is run. A checker exception on a malformed
call (arguments that are a list, say: the reference stops the whole scoring there) is that item's verdict, invalid.
"""

import json
import sys

# The name BFCLv4Scorer gives the checker: its "-FC" config turns underscores back into dots in function names.
AST_CHECKER_MODEL_NAME = "gpt-4o-2024-11-20-FC"


def main(argv: list[str]) -> int:
    from importlib.metadata import version

    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    request = json.loads(open(argv[1], encoding="utf-8").read())
    results = []
    for item in request["items"]:
        try:
            r = ast_checker(func_description=item["functions"], model_output=item["model_output"],
                            possible_answer=item["possible_answer"], language=Language[item["language"]],
                            test_category=item["test_category"], model_name=AST_CHECKER_MODEL_NAME)
            results.append({"valid": bool(r["valid"]), "error": [str(e) for e in r.get("error", [])],
                            "error_type": str(r.get("error_type", ""))})
        except Exception as e:  # noqa: BLE001 - a malformed call is the model's answer, judged invalid
            results.append({"valid": False, "error": [f"{type(e).__name__}: {e}"], "error_type": "checker_raised"})
    with open(argv[2], "w", encoding="utf-8") as f:
        json.dump({"bfcl_eval": version("bfcl-eval"), "results": results}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
