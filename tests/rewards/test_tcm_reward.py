"""Unit tests for the TCM syndrome-differentiation reward (entrypoint/rewards/tcm.py)."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pytest

from entrypoint.rewards import tcm

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "tcm" / "sample.jsonl"


def answer(text: str) -> str:
    return f"<think>分析</think><answer>{text}</answer>"


# --- extract_answer -------------------------------------------------------------------------------


def test_extract_answer_takes_the_last_span():
    completion = "<answer>脾气虚</answer> 再想想 <answer>\n 肝郁脾虚 \n</answer> 结束"
    assert tcm.extract_answer(completion) == "肝郁脾虚"


def test_extract_answer_none_without_a_closed_span():
    assert tcm.extract_answer("<think>肝郁脾虚</think>") is None
    assert tcm.extract_answer("<answer>肝郁脾虚") is None
    assert tcm.extract_answer("") is None


def test_extract_answer_ignores_unclosed_tag_after_the_last_span():
    assert tcm.extract_answer("<answer>血瘀</answer><answer>痰湿") == "血瘀"


def test_extract_answer_is_fast_on_many_unclosed_tags():
    # Quadratic behaviour would take minutes here; the rfind bound keeps it linear.
    hostile = "<answer>" * 200_000 + "</answer>" + "<answer>" * 200_000
    assert tcm.extract_answer(hostile) == "<answer>" * 199_999


# --- normalize --------------------------------------------------------------------------------------


def test_normalize_nfkc_fullwidth_letters_digits_punct():
    assert tcm.normalize("ＡＢＣ１２３") == "ABC123"
    assert tcm.normalize("（肝郁脾虚）") == "肝郁脾虚"
    assert tcm.normalize("肝郁脾虚Ⅱ型") == "肝郁脾虚II型"


def test_normalize_removes_whitespace_inside_names():
    assert tcm.normalize(" 肝 郁\t脾\u3000虚\n") == "肝郁脾虚"


def test_normalize_strips_surrounding_quotes_and_brackets():
    assert tcm.normalize("「肝郁脾虚」") == "肝郁脾虚"
    assert tcm.normalize("“血瘀”。") == "血瘀"
    assert tcm.normalize("【气阴两虚】") == "气阴两虚"


def test_normalize_strips_trailing_zheng_and_zhengxing():
    assert tcm.normalize("肝郁脾虚证") == "肝郁脾虚"
    assert tcm.normalize("肝郁脾虚证型") == "肝郁脾虚"
    assert tcm.normalize("「肝郁脾虚证」。") == "肝郁脾虚"
    # Only one suffix, only at the end.
    assert tcm.normalize("证候肝郁") == "证候肝郁"


def test_normalize_traditional_to_simplified_before_suffix_strip():
    assert tcm.normalize("肝鬱脾虛證") == "肝郁脾虚"
    assert tcm.normalize("濕熱蘊結") == "湿热蕴结"
    assert tcm.normalize("氣陰兩虛") == "气阴两虚"
    assert tcm.normalize("腎陽虛證型") == "肾阳虚"


def test_trad_table_is_one_char_to_a_different_char_and_nfkc_stable():
    for trad, simp in tcm.TRAD_TO_SIMP.items():
        assert len(trad) == len(simp) == 1
        assert trad != simp
        assert unicodedata.normalize("NFKC", trad) == trad


# --- split_syndromes --------------------------------------------------------------------------------


@pytest.mark.parametrize("sep", [";", "；", "、", "|", "，", ",", "｜"])
def test_split_on_each_separator(sep):
    assert tcm.split_syndromes(f"肝郁脾虚{sep}血瘀") == ["肝郁脾虚", "血瘀"]


def test_separators_constant_is_the_documented_list():
    assert tcm.SEPARATORS == (";", "；", "、", "|", "，", ",")


def test_jian_is_not_a_separator():
    assert tcm.split_syndromes("肝郁脾虚兼血瘀") == ["肝郁脾虚兼血瘀"]


def test_split_dedupes_after_normalisation_and_drops_empties():
    assert tcm.split_syndromes("肝郁脾虚证；；肝鬱脾虛、血瘀，, 证") == ["肝郁脾虚", "血瘀"]
    assert tcm.split_syndromes("") == []
    assert tcm.split_syndromes(" ；、 ") == []


# --- score ------------------------------------------------------------------------------------------


def test_exact_single_match_scores_one():
    assert tcm.score(answer("肝郁脾虚"), "肝郁脾虚") == 1.0


def test_single_match_after_normalisation_scores_one():
    assert tcm.score(answer(" 肝鬱脾虛證 "), "肝郁脾虚") == 1.0
    assert tcm.score(answer("肝郁脾虚"), "肝郁脾虚证型") == 1.0


def test_single_mismatch_scores_zero():
    assert tcm.score(answer("脾气虚"), "肝郁脾虚") == 0.0


def test_missing_answer_scores_zero():
    assert tcm.score("<think>肝郁脾虚</think>肝郁脾虚", "肝郁脾虚") == 0.0
    assert tcm.score("", "肝郁脾虚") == 0.0


def test_empty_answer_or_empty_solution_scores_zero():
    assert tcm.score(answer(""), "肝郁脾虚") == 0.0
    assert tcm.score(answer("肝郁脾虚"), "") == 0.0


def test_last_answer_span_is_scored():
    assert tcm.score("<answer>脾气虚</answer><answer>肝郁脾虚</answer>", "肝郁脾虚") == 1.0
    assert tcm.score("<answer>肝郁脾虚</answer><answer>脾气虚</answer>", "肝郁脾虚") == 0.0


def test_multi_reference_partial_credit():
    # precision 1, recall 0.5 -> F1 = 2 * 1 * 0.5 / 1.5
    assert tcm.score(answer("肝郁脾虚"), "肝郁脾虚；血瘀") == pytest.approx(2 / 3)
    assert round(tcm.score(answer("肝郁脾虚"), "肝郁脾虚；血瘀"), 4) == 0.6667


def test_multi_reference_full_match_in_any_order_and_separator():
    assert tcm.score(answer("血瘀、肝郁脾虚证"), "肝郁脾虚；血瘀") == 1.0


def test_extra_wrong_prediction_lowers_precision():
    # precision 0.5, recall 1 -> 2/3
    assert tcm.score(answer("肝郁脾虚；痰湿"), "肝郁脾虚") == pytest.approx(2 / 3)
    # precision 1/3, recall 1 -> 0.5
    assert tcm.score(answer("肝郁脾虚；痰湿；血瘀"), "肝郁脾虚") == pytest.approx(0.5)


def test_duplicates_do_not_inflate():
    assert tcm.score(answer("肝郁脾虚；肝郁脾虚；肝鬱脾虛證"), "肝郁脾虚；血瘀") == pytest.approx(2 / 3)
    assert tcm.score(answer("肝郁脾虚；肝郁脾虚；痰湿"), "肝郁脾虚") == pytest.approx(2 / 3)


def test_hostile_answer_scores_zero_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    completion = f"<answer>__import__('os').system('touch {marker}')</answer>"
    assert tcm.score(completion, "肝郁脾虚") == 0.0
    assert not marker.exists()
    literal = "/tmp/pwned"  # noqa: S108 - the path named in the payload, only checked, never written
    existed = os.path.exists(literal)
    assert tcm.score("<answer>__import__('os').system('touch /tmp/pwned')</answer>", "肝郁脾虚") == 0.0
    assert os.path.exists(literal) == existed


def test_oversized_answer_scores_zero():
    huge = "；".join(["肝郁脾虚"] * 1000)  # > MAX_ANSWER_CHARS, although it contains the right name
    assert len(huge) > tcm.MAX_ANSWER_CHARS
    assert tcm.score(answer(huge), "肝郁脾虚") == 0.0


def test_non_str_inputs_score_zero():
    assert tcm.score(answer("肝郁脾虚"), None) == 0.0  # type: ignore[arg-type]
    assert tcm.score(answer("肝郁脾虚"), ["肝郁脾虚"]) == 0.0  # type: ignore[arg-type]
    assert tcm.score(None, "肝郁脾虚") == 0.0  # type: ignore[arg-type]


def test_odd_unicode_never_raises():
    for text in ["\x00", "\ud800", "<answer>\ud800\x00</answer>", "<answer>" + "\u0301" * 1500 + "</answer>"]:
        assert tcm.score(text, "肝郁脾虚") == 0.0


# --- tcm_rewards ------------------------------------------------------------------------------------


def test_batch_is_row_aligned():
    completions = [answer("肝郁脾虚"), answer("血瘀"), "no answer"]
    solutions = ["肝郁脾虚", "肝郁脾虚；血瘀", "血瘀"]
    assert tcm.tcm_rewards(completions, solutions) == pytest.approx([1.0, 2 / 3, 0.0])


def test_batch_length_mismatch_raises():
    with pytest.raises(ValueError):
        tcm.tcm_rewards([answer("血瘀")], ["血瘀", "血瘀"])


# --- sample dataset ---------------------------------------------------------------------------------


def load_sample() -> list[dict]:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_sample_rows_have_the_documented_schema():
    rows = load_sample()
    assert len(rows) == 30
    for row in rows:
        messages = row["messages"]
        assert isinstance(messages, list) and messages
        assert messages[-1]["role"] == "user"
        assert isinstance(messages[-1]["content"], str) and messages[-1]["content"].strip()
        assert [m["role"] for m in messages[:-1]] in ([], ["system"])
        assert isinstance(row["solution"], str) and row["solution"].strip()
        assert tcm.split_syndromes(row["solution"])
    assert any(len(tcm.split_syndromes(r["solution"])) > 1 for r in rows)
    assert any(r["messages"][0]["role"] == "system" for r in rows)


def test_sample_rewards_right_and_wrong_answers():
    rows = load_sample()
    solutions = [r["solution"] for r in rows]
    right = [f"<think>x</think><answer>{s}</answer>" for s in solutions]
    wrong = ["<think>x</think><answer>无此证型</answer>" for _ in solutions]
    assert tcm.tcm_rewards(right, solutions) == [1.0] * len(rows)
    assert tcm.tcm_rewards(wrong, solutions) == [0.0] * len(rows)
