"""Client-side prompt variants of stage-2 training rows (textfree.ppft.prompt_variants)."""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter

import pytest
from scipy import stats

from textfree.ppft.prompt_variants import PromptVariants, rewrite_ddx, rewriter_for

ALPHA = 1e-6
HISTORY = (
    "A 46-year-old male has a history of chronic pancreatitis, diabetes, obesity. The 46-year-old male presents "
    "the symptoms of cough, pale stools and dark urine, skin lesions. What is the likely diagnosis?"
)
SYMPTOMS_ONLY = (
    "A 14-year-old woman presents the symptoms of cough, fever, mood instability, pain. What is the likely diagnosis?"
)


def _lists(text: str) -> tuple[list[str], list[str]]:
    if " has a history of " in text:
        history = text.split(" has a history of ")[1].split(". The ")[0].split(", ")
    else:
        history = []
    symptoms = text.split(" presents the symptoms of ")[1].split(". What")[0].split(", ")
    return history, symptoms


def test_shuffle_keeps_every_item_and_the_rest_of_the_prompt():
    rng = random.Random(0)
    for text in (HISTORY, SYMPTOMS_ONLY):
        history, symptoms = _lists(text)
        seen = set()
        for _ in range(50):
            new = rewrite_ddx(text, rng, shuffle=True, drop=0.0)
            h, s = _lists(new)
            assert sorted(h) == sorted(history) and sorted(s) == sorted(
                symptoms
            )  # "pale stools and dark urine" is one item
            assert new.endswith(" What is the likely diagnosis?")
            assert new.startswith(
                text.split(" has a history of ")[0] if history else "A 14-year-old woman presents the symptoms of "
            )
            seen.add(new)
        assert len(seen) > 1


def test_shuffle_draws_every_order_equally_often():
    """A 3-item list: the 6 orders, chi-square at alpha 1e-6 (6,000 draws)."""
    text = "A 3-year-old male presents the symptoms of a, b, c. Q?"
    rng = random.Random(1)
    counts = Counter(rewrite_ddx(text, rng, shuffle=True, drop=0.0) for _ in range(6000))
    assert len(counts) == 6
    assert stats.chisquare(list(counts.values())).pvalue > ALPHA
    orders = {f"A 3-year-old male presents the symptoms of {', '.join(p)}. Q?" for p in itertools.permutations("abc")}
    assert set(counts) == orders


def test_drop_leaves_items_out_at_its_rate_and_never_empties_a_list():
    items = [f"s{i}" for i in range(10)]
    text = (
        "A 30-year-old man has a history of h1, h2. The 30-year-old man presents the symptoms of "
        f"{', '.join(items)}. Q?"
    )
    rng = random.Random(2)
    kept = trials = 0
    for _ in range(2000):
        new = rewrite_ddx(text, rng, shuffle=False, drop=0.3)
        h, s = _lists(new.replace(". Q?", ". What"))
        assert h and s  # at least one item per list
        assert s == [x for x in items if x in s]  # no shuffle: the kept items stay in order
        kept += len(s)
        trials += len(items)
    # P(all 10 dropped) = 0.3**10 = 5.9e-6: the keep-one rule barely moves the rate; binomial test at alpha 1e-6
    assert stats.binomtest(trials - kept, trials, 0.3).pvalue > ALPHA
    always = rewrite_ddx("A 3-year-old male presents the symptoms of a. Q?", rng, shuffle=True, drop=0.9)
    assert always == "A 3-year-old male presents the symptoms of a. Q?"


def test_prompts_outside_the_template_are_not_rewritten():
    rng = random.Random(0)
    assert rewrite_ddx("The patient coughs.", rng, shuffle=True, drop=0.5) is None
    variants = PromptVariants(1.0, True, 0.0)
    out = variants.epoch_rewrites(["The patient coughs.", HISTORY], rewrite_ddx, seed=3)
    assert list(out) == [1]


def test_epoch_rewrites_are_seeded_and_rewrite_about_prob_of_the_rows():
    texts = [HISTORY] * 4000
    variants = PromptVariants(0.25, True, 0.2)
    a = variants.epoch_rewrites(texts, rewrite_ddx, seed=7)
    assert a == variants.epoch_rewrites(texts, rewrite_ddx, seed=7)
    assert a != variants.epoch_rewrites(texts, rewrite_ddx, seed=8)
    # a drawn rewrite equal to the prompt is left out: that takes nothing dropped (0.8 ** 6) and both 3-item lists
    # back in their order (1/6 each), so the share rewritten is 0.25 * (1 - 0.8 ** 6 / 36); binomial at alpha 1e-6
    assert stats.binomtest(len(a), len(texts), 0.25 * (1 - 0.8**6 / 36)).pvalue > ALPHA
    assert all(t != HISTORY for t in a.values())
    assert PromptVariants().epoch_rewrites(texts, rewrite_ddx, seed=7) == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prob": 1.5}, r"prompt_variants must be a number in \[0, 1.0\], got 1.5"),
        ({"prob": float("nan")}, "prompt_variants must be a number"),
        ({"prob": True}, "prompt_variants must be a number"),
        ({"prob": 0.5, "drop": 0.95}, r"prompt_variant_drop must be a number in \[0, 0.9\], got 0.95"),
        ({"prob": 0.5, "drop": -0.1}, "prompt_variant_drop must be a number"),
        ({"prob": 0.5, "shuffle": "yes"}, "prompt_variant_shuffle must be true or false, got 'yes'"),
        ({"prob": 0.5, "shuffle": False}, "would send the prompts unchanged"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PromptVariants(**kwargs)


def test_to_dict_records_the_setting_or_none():
    assert PromptVariants().to_dict() is None and not PromptVariants().active
    assert PromptVariants(0.5, True, 0.1).to_dict() == {"prob": 0.5, "shuffle": True, "drop": 0.1}


def test_rewriters_are_found_by_name_or_data_directory():
    assert rewriter_for("pri-ddx") is rewrite_ddx and rewriter_for("DDX") is rewrite_ddx
    assert rewriter_for("/data/privacyrestore/Pri-DDXPlus_dataset/") is rewrite_ddx
    with pytest.raises(ValueError, match=r"no prompt rewriter for dataset 'pri-slja'; prompt variants exist for \["):
        rewriter_for("pri-slja")


def _said_items(new: str, original: str) -> list[str]:
    """The list items of ``original`` that a reframed ``new`` says (a frame joins the last two with ' and ')."""
    history, symptoms = _lists(original)
    return [item for item in history + symptoms if item in new]


def _frame_pattern(frame: str) -> re.Pattern[str]:
    """A frame of a 46-year-old male as a regex; its lists as groups."""
    who = {"age": "46", "sex": "male", "person": "man", "mf": "M"}
    parts = re.split(r"(\{\w+\})", frame)
    out = []
    for part in parts:
        name = part[1:-1] if part.startswith("{") else None
        out.append(re.escape(who[name]) if name in who else f"(?P<{name}>.+)" if name else re.escape(part))
    return re.compile("".join(out) + re.escape(" What is the likely diagnosis?"))


def _is_list_of(said: str, items: list[str]) -> bool:
    """``said`` is exactly ``items`` in some order, joined by ', ' and a final ' and '."""
    rest = said
    for item in sorted(items, key=len, reverse=True):
        if item not in rest:
            return False
        rest = rest.replace(item, "|", 1)
    return rest.replace(", ", "").replace(" and ", "") == "|" * len(items)


def test_rephrase_says_the_same_case_in_other_frames_and_adds_nothing():
    from textfree.ppft.prompt_variants import DDX_FRAMES

    history, symptoms = _lists(HISTORY)
    patterns = {f: _frame_pattern(f) for f in DDX_FRAMES}
    rng = random.Random(3)
    frames_seen = set()
    for _ in range(400):
        new = rewrite_ddx(HISTORY, rng, shuffle=True, drop=0.0, rephrase=1.0)
        hits = [(f, m) for f, p in patterns.items() if (m := p.fullmatch(new))]
        assert hits, new  # one of the frames, about the same person, with the question kept
        frame, m = hits[0]
        assert _is_list_of(m["symptoms"], symptoms), new  # every symptom, nothing added
        if "{history}" in frame:
            assert _is_list_of(m["history"], history), new
        frames_seen.add(frame)
    assert frames_seen == set(DDX_FRAMES)  # every frame is drawn
    rng = random.Random(4)
    for _ in range(50):  # a prompt without a history is never given one
        new = rewrite_ddx(SYMPTOMS_ONLY, rng, shuffle=False, drop=0.0, rephrase=1.0)
        assert "history" not in new.lower() and "past" not in new.lower(), new


def test_rephrase_zero_is_the_old_rewrite_draw_for_draw():
    a, b = random.Random(7), random.Random(7)
    for _ in range(100):
        assert rewrite_ddx(HISTORY, a, shuffle=True, drop=0.3) == rewrite_ddx(
            HISTORY, b, shuffle=True, drop=0.3, rephrase=0.0
        )


def test_rephrase_is_validated_and_recorded():
    with pytest.raises(ValueError, match=r"prompt_variant_rephrase must be a number in \[0, 1.0\], got 2"):
        PromptVariants(0.5, rephrase=2)
    assert PromptVariants(0.5, shuffle=False, rephrase=0.5).to_dict() == {
        "prob": 0.5,
        "shuffle": False,
        "drop": 0.0,
        "rephrase": 0.5,
    }
    assert PromptVariants(0.5).to_dict() == {"prob": 0.5, "shuffle": True, "drop": 0.0}  # as summaries were
