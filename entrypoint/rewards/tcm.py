"""TCM syndrome-differentiation (中医辨证) reward: does the predicted syndrome set match the reference?

This is the project's stand-in for the `TCMSDAccuracy` reward named in the seed document; ms-swift does
not ship one. Stdlib only (no ms-swift import); wrapped as an ORM elsewhere.

Scoring rule (`score`):
    1. Take the text of the LAST `<answer>...</answer>` span of the completion. No span, or a span over
       `MAX_ANSWER_CHARS` characters, scores 0.0.
    2. Split the answer and the reference (`solution` column) into syndrome names on `SEPARATORS`,
       normalise each name (`normalize`), drop empty names and duplicates.
    3. Score = F1 of the predicted set P against the reference set R:
       precision = |P∩R| / |P|, recall = |P∩R| / |R|, F1 = 2·p·r / (p + r); 0.0 if either set is empty
       or nothing matches. One reference and one prediction therefore score 1.0 or 0.0.

Separators between several syndromes in one string (`SEPARATORS`):
    ;  ；  、  |  ，  ,
The text is NFKC-normalised before splitting, so full-width variants of the ASCII ones (e.g. ｜) also
split. Anything else is part of a name: newlines and spaces are removed inside a name, not split on, and
"兼" ("combined with", e.g. "肝郁脾虚兼血瘀") is NOT a separator, so such a compound is one name. A
reference that means two separate syndromes must join them with a separator, e.g. "肝郁脾虚；血瘀".

Normalisation (`normalize`), in this order: Unicode NFKC (full-width letters, digits and punctuation to
half-width); traditional -> simplified through the deliberately small `TRAD_TO_SIMP` table; removal of all
whitespace; stripping of punctuation, quotes and brackets at either end; stripping of a trailing
"证型" or "证" suffix ("肝鬱脾虛證" -> "肝郁脾虚").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

SEPARATORS: tuple[str, ...] = (";", "；", "、", "|", "，", ",")

# An answer longer than this is not a list of syndrome names; refuse it instead of processing it.
MAX_ANSWER_CHARS = 2000

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_SPLIT_RE = re.compile("|".join(re.escape(s) for s in SEPARATORS))
_WHITESPACE_RE = re.compile(r"\s+")
# Suffixes stripped from the end of a name, longest first.
SUFFIXES: tuple[str, ...] = ("证型", "证")

# Traditional -> simplified for characters common in TCM syndrome names. Deliberately small: a full
# OpenCC-style conversion is a dependency this reward does not need; extend it when a dataset needs more.
# Characters that are the same in both scripts (脾 肝 瘀 血 痰 ...) are not listed.
_TRAD = (
    "證虛濕熱氣陰陽腎鬱風滯實衛營脈膽腸蘊結兩虧損閉絡脫溫涼傷內裏襲擾竅飲濁瀉衝動經脅腦運統攝亂與並帶痺熾飢蟲"
)
_SIMP = (
    "证虚湿热气阴阳肾郁风滞实卫营脉胆肠蕴结两亏损闭络脱温凉伤内里袭扰窍饮浊泻冲动经胁脑运统摄乱与并带痹炽饥虫"
)
TRAD_TO_SIMP: dict[str, str] = dict(zip(_TRAD, _SIMP, strict=True))
_TRAD_TABLE = str.maketrans(TRAD_TO_SIMP)


def _is_edge_junk(ch: str) -> bool:
    """Punctuation (incl. quotes, brackets), symbols and separators-as-whitespace at a name's edges."""
    return unicodedata.category(ch)[0] in ("P", "S", "Z")


def extract_answer(completion: str) -> str | None:
    """Text of the last `<answer>...</answer>` span (may span lines), stripped; None if there is none.

    `completion` is one model completion (str). Same span semantics as `re.findall(ANSWER_RE)[-1]`, but
    the search only runs up to the last `</answer>`, so text with many unclosed `<answer>` tags stays
    linear-time.
    """
    end = completion.rfind("</answer>")
    if end < 0:
        return None
    spans = ANSWER_RE.findall(completion, 0, end + len("</answer>"))
    return spans[-1].strip() if spans else None


def normalize(name: str) -> str:
    """Canonical form of one syndrome name (str -> str, possibly "" when nothing is left).

    Steps, in order: NFKC; traditional -> simplified (`TRAD_TO_SIMP`); remove all whitespace; strip
    punctuation/quotes/brackets/symbols at both ends; strip one trailing "证型" or "证"; strip edge
    punctuation again. Example: " 「肝鬱脾虛證」 " -> "肝郁脾虚".
    """
    text = unicodedata.normalize("NFKC", name).translate(_TRAD_TABLE)
    text = _WHITESPACE_RE.sub("", text)
    text = _strip_edges(text)
    for suffix in SUFFIXES:
        if text.endswith(suffix):
            text = text[: -len(suffix)]
            break
    return _strip_edges(text)


def _strip_edges(text: str) -> str:
    start, end = 0, len(text)
    while start < end and _is_edge_junk(text[start]):
        start += 1
    while end > start and _is_edge_junk(text[end - 1]):
        end -= 1
    return text[start:end]


def split_syndromes(text: str) -> list[str]:
    """Normalised syndrome names in `text`, in order of first appearance, without empties or duplicates.

    `text` is NFKC-normalised, split on `SEPARATORS`, and each piece passed through `normalize`.
    Example: "肝郁脾虚证；血瘀、肝鬱脾虛" -> ["肝郁脾虚", "血瘀"].
    """
    names: list[str] = []
    for piece in _SPLIT_RE.split(unicodedata.normalize("NFKC", text)):
        name = normalize(piece)
        if name and name not in names:
            names.append(name)
    return names


def score(completion: str, solution: str) -> float:
    """F1 in [0, 1] of the completion's answer syndromes against the reference `solution`.

    `completion`: one model completion; `solution`: the dataset's reference, one syndrome name or several
    joined by a separator. 0.0 when there is no answer span, the span is over `MAX_ANSWER_CHARS`, either
    side has no names, or an input is not a str. One reference and one prediction: 1.0 on a normalised
    match, else 0.0. Never raises.
    """
    if not isinstance(completion, str) or not isinstance(solution, str):
        return 0.0
    try:
        answer = extract_answer(completion)
        if answer is None or len(answer) > MAX_ANSWER_CHARS:
            return 0.0
        predicted = split_syndromes(answer)
        reference = split_syndromes(solution)
        if not predicted or not reference:
            return 0.0
        hits = len(set(predicted) & set(reference))
        if hits == 0:
            return 0.0
        precision = hits / len(predicted)
        recall = hits / len(reference)
        return 2 * precision * recall / (precision + recall)
    except Exception:  # a reward must never take the training step down
        return 0.0


def tcm_rewards(completions: Sequence[str], solution: Sequence[str]) -> list[float]:
    """Batch form: one `score` per completion; `solution` is the dataset column, row-aligned (same length,
    else ValueError from zip(strict=True))."""
    return [score(c, s) for c, s in zip(completions, solution, strict=True)]
