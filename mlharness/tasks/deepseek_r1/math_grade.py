"""MATH500 answer equivalence as the official deepseek-r1 ``eval_accuracy.py`` decides it: the PRM800K grader
(``grading.grader.grade_answer`` of github.com/openai/prm800k, which the reference loads from its git submodule;
no PyPI package ships it), written out here step for step so the verdicts are the same.

An answer is right when (a) the Hendrycks MATH normalisation (``math_normalize``) makes both strings equal, or
(b) PRM800K's own normalisation makes them equal, or (c) both split into the same number of tuple elements and
each pair is equal: unreduced fractions only character for character, an integer only against an integer form,
anything else when sympy simplifies the difference to 0 (``pylatexenc`` turns LaTeX into text first). So
``1/2`` and ``\\frac{1}{2}`` match, ``0.5`` matches ``\\frac{1}{2}`` (the MATH normalisation rewrites the string
"0.5"), but ``2/4`` does not match ``1/2``.
"""

from __future__ import annotations

import re
from typing import Any

UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month", "year",
         "foot", "feet", "inch", "yard")
# expressions sympy may hang on are never evaluated
HANG_SUBSTRINGS = ("^{", "^(")
HANG_PATTERNS = (r"\^[0-9]+\^", r"\^[0-9][0-9]+")
BRACKETS = "()[]"
TEXT_WRAPPER = r"^\\text\{(?P<text>.+?)\}$"


# ---- the Hendrycks MATH normalisation (PRM800K's math_normalize) --------------------------------------------

def mathd_normalize(answer: str | None) -> str | None:
    if answer is None:
        return None
    answer = answer.strip()
    try:
        found = re.search(TEXT_WRAPPER, answer)
        if found is not None:
            answer = found.group("text").strip()
        return _mathd_strip(answer)
    except Exception:  # the reference keeps the (unwrapped) answer when a step fails
        return answer


def _braced_fracs(text: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{7}`` -> ``\\frac{1}{7}``; the text unchanged on a short tail."""
    head, *tails = text.split("\\frac")
    out = head
    for tail in tails:
        out += "\\frac"
        if tail[0] == "{":
            out += tail
            continue
        if len(tail) < 2:
            return text
        num, den, rest = tail[0], tail[1], tail[2:]
        out += "{" + num + "}" + (den if den == "{" else "{" + den + "}") + rest
    return out


def _slash_to_frac(text: str) -> str:
    parts = text.split("/")
    if len(parts) != 2:
        return text
    try:
        num, den = int(parts[0]), int(parts[1])
    except ValueError:
        return text
    if text != f"{num}/{den}":
        return text
    return "\\frac{" + str(num) + "}{" + str(den) + "}"


def _drop_right_units(text: str) -> str:
    if "\\text{ " not in text:
        return text
    parts = text.split("\\text{ ")
    if len(parts) != 2:
        raise ValueError("units appear more than once")
    return parts[0]


def _braced_sqrt(text: str) -> str:
    if "\\sqrt" not in text:
        return text
    head, *tails = text.split("\\sqrt")
    out = head
    for tail in tails:
        out += "\\sqrt" + (tail if tail[0] == "{" else "{" + tail[0] + "}" + tail[1:])
    return out


def _mathd_strip(s: str) -> str:
    for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"),
                     ("\\left", ""), ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", "")):
        s = s.replace(old, new)
    s = _drop_right_units(s)
    s = s.replace("\\%", "").replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "x = 3" -> "3"
        s = sides[1]
    s = _braced_sqrt(s)
    s = s.replace(" ", "")
    s = _braced_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_to_frac(s)


# ---- PRM800K's normalisation and sympy check ------------------------------------------------------------------

def _latex_to_text(expr: str) -> str:
    from pylatexenc import latex2text

    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = latex2text.LatexNodes2Text().latex_to_text(expr)
    for symbol, word in (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*")):
        expr = expr.replace(symbol, word)
    return expr.strip()


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _near_int(x: float) -> bool:
    try:
        return abs(x - int(round(x))) <= 1e-7
    except Exception:
        return False


def _looks_like_fraction(expr: str) -> bool:
    return bool(re.search(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$", expr))


def _drop_thousands_commas(expr: str) -> str:
    pattern = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
    while True:
        shorter = pattern.sub("\\1\\3\\4", expr)
        if shorter == expr:
            return shorter
        expr = shorter


def _is_int_text(text: str) -> bool:
    try:
        value = float(_drop_thousands_commas(text))
        return abs(value - int(round(value))) <= 1e-7
    except Exception:
        return False


def prm_normalize(expr: str | None) -> str | None:
    if expr is None:
        return None
    found = re.search(TEXT_WRAPPER, expr)
    if found is not None:
        expr = found.group("text")
    for old, new in (("\\%", "%"), ("\\$", "$"), ("$", ""), ("%", ""), (" or ", " , "), (" and ", " , "),
                     ("million", "*10^6"), ("billion", "*10^9"), ("trillion", "*10^12")):
        expr = expr.replace(old, new)
    for unit in UNITS:
        expr = re.sub(f"{unit}(es)?(s)? *(\\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    if _parses_as_float(expr) and _near_int(float(expr)):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        try:
            expr = _latex_to_text(expr)
        except Exception:
            pass
    expr = re.sub("- *", "-", expr)
    expr = re.compile("([0-9]) +([0-9])").sub("\\1+\\2", expr)  # mixed numbers: "7 3/4" -> "7+3/4"
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _is_int_text(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _may_evaluate(expr: str) -> bool:
    letters = {ch for ch in expr.replace("sqrt", "").replace("frac", "") if ch.isalpha()}
    if len(letters) > 2:
        return False
    if any(bad in expr for bad in HANG_SUBSTRINGS):
        return False
    return not any(re.search(p, expr) is not None for p in HANG_PATTERNS)


def _sympy_parse(expr: str) -> Any:
    from sympy.parsing import sympy_parser

    return sympy_parser.parse_expr(expr.replace("^", "**"), transformations=(
        sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,)))


def _sympy_equal(truth: str, given: str) -> bool:
    import sympy

    try:
        expr = f"({truth})-({given})"
        if _may_evaluate(expr):
            return sympy.simplify(_sympy_parse(expr)) == 0
    except Exception:
        pass
    return False


def _tuple_elements(expr: str) -> list[str]:
    expr = _drop_thousands_commas(expr)
    if not expr:
        return []
    if (len(expr) > 2 and expr[0] in BRACKETS and expr[-1] in BRACKETS
            and all(ch not in expr[1:-1] for ch in BRACKETS)):
        return [part.strip() for part in expr[1:-1].split(",")]
    return [expr]


def grade_answer(given_answer: str | None, ground_truth: str) -> bool:
    """PRM800K's verdict: is ``given_answer`` the same mathematical answer as ``ground_truth``?"""
    if given_answer is None:
        return False
    if mathd_normalize(ground_truth) == mathd_normalize(given_answer):
        return True
    truth = prm_normalize(ground_truth)
    given = prm_normalize(given_answer)
    if truth is None:
        return False
    if truth == given:
        return True
    if not given:
        return False
    truth_parts, given_parts = _tuple_elements(truth), _tuple_elements(given)
    if len(truth_parts) > 1 and (truth[0] != given[0] or truth[-1] != given[-1]):
        return False
    if len(truth_parts) != len(given_parts):
        return False
    for t, g in zip(truth_parts, given_parts, strict=True):
        if _looks_like_fraction(t) and _looks_like_fraction(g):
            same = t == g  # an unreduced fraction is not simplified into a right answer
        elif _is_int_text(t) != _is_int_text(g):
            same = False  # an integer answer must be given as an integer
        else:
            same = _sympy_equal(t, g)
        if not same:
            return False
    return True
