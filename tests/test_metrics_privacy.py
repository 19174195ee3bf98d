"""Text-overlap and leakage metrics against values computed by hand (issue 4, metrics)."""

import math

import numpy as np
import pytest
import torch
from rouge_score import rouge_scorer
from scipy.special import digamma

from textfree.metrics import (
    PRF,
    attribute_recall,
    best_window_similarity,
    corpus_bleu,
    corpus_rouge_l,
    empirical_privacy,
    ksg_mutual_information,
    multilabel_prf,
    normalized_tokens,
    pii_recovery,
    rouge_l,
    score_gain,
)
from textfree.metrics.privacy import kl_mutual_information


# ---------------------------------------------------------------------------------------------- tokenizer
def test_tokens_keep_non_ascii_and_split_cjk():
    # NFKC + casefold; punctuation and symbols (€) are separators; each CJK character is one token
    assert normalized_tokens("Café AU-lait, 2 €!") == ["café", "au", "lait", "2"]
    assert normalized_tokens("我住在北京 NOW") == ["我", "住", "在", "北", "京", "now"]
    assert normalized_tokens("Привет, мир") == ["привет", "мир"]
    assert normalized_tokens("cafe\u0301") == ["café"]  # NFD accent composed by NFKC, not split off
    assert normalized_tokens("HIV+ 5$", keep_symbols=True) == ["hiv+", "5$"]


# ------------------------------------------------------------------------------------------------ ROUGE-L
ASCII_PAIRS = [
    ("the cat sat on the mat", "the cat lay on the mat"),
    ("The patients' BP was 120/80; pulse_rate=72!", "patient bp 120 80, pulse rate 72"),
    ("Running quickly, the dogs chased cats.", "the dog runs after the cat"),
    ("", "something"),
    ("A B C D", "d c b a"),
]


@pytest.mark.parametrize("use_stemmer", [False, True])
def test_rouge_l_equals_rouge_score_default_on_ascii(use_stemmer):
    default = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)
    for pred, ref in ASCII_PAIRS:
        want = default.score(ref, pred)["rougeL"]
        got = rouge_l(pred, ref, use_stemmer=use_stemmer)
        assert got == PRF(want.precision, want.recall, want.fmeasure), (pred, ref)


def test_rouge_l_hand_values():
    # LCS("the cat sat on the mat", "the cat lay on the mat") = "the cat on the mat" = 5 of 6 tokens each side
    assert rouge_l("the cat sat on the mat", "the cat lay on the mat") == pytest.approx((5 / 6, 5 / 6, 5 / 6))
    # prediction "the cat" inside reference "the cat sat": LCS 2, P = 2/2, R = 2/3, F = 2*1*(2/3)/(5/3) = 0.8
    assert rouge_l("the cat", "the cat sat") == pytest.approx((1.0, 2 / 3, 0.8))
    # LCS of "a b c d" and "d c b a" is one token: P = R = F = 1/4
    assert rouge_l("A B C D", "d c b a") == pytest.approx((0.25, 0.25, 0.25))
    assert rouge_l("", "something") == (0.0, 0.0, 0.0)


def test_rouge_l_counts_non_ascii_tokens():
    default = rouge_scorer.RougeScorer(["rougeL"])
    # ours: [café, crème] vs [café, noir]: LCS 1 -> P = R = 1/2
    # rouge-score: [caf, cr, me] vs [caf, noir] -> P = 1/3, R = 1/2
    assert rouge_l("café crème", "café noir") == pytest.approx((0.5, 0.5, 0.5))
    assert default.score("café noir", "café crème")["rougeL"].precision == pytest.approx(1 / 3)
    # Chinese, one token per character: 我住在北京 vs 我住在上海: LCS 我住在 = 3 of 5 -> 0.6
    # rouge-score drops every character: no tokens -> 0
    assert rouge_l("我住在北京", "我住在上海") == pytest.approx((0.6, 0.6, 0.6))
    assert default.score("我住在上海", "我住在北京")["rougeL"].fmeasure == 0.0
    assert rouge_l("北京", "北京").f1 == 1.0


def test_corpus_rouge_l_is_mean_over_pairs():
    # pair 1: (1, 2/3, 0.8) as above; pair 2: identical -> (1, 1, 1); pair 3: no overlap -> 0
    got = corpus_rouge_l(["the cat", "x y", "a"], ["the cat sat", "X, y.", "b"])
    assert got == pytest.approx(((1 + 1 + 0) / 3, (2 / 3 + 1 + 0) / 3, (0.8 + 1 + 0) / 3))


def test_rouge_l_errors():
    with pytest.raises(ValueError, match="same length, got 2 and 1"):
        corpus_rouge_l(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="empty corpus"):
        corpus_rouge_l([], [])
    with pytest.raises(ValueError, match="single string"):
        corpus_rouge_l("abc", "abc")
    with pytest.raises(ValueError, match="prediction must be a string, got int"):
        rouge_l(3, "a")


def test_score_gain_hand_values():
    # (score - reference) / (1 - reference): the share of the room above the no-input reference a score takes.
    assert score_gain(0.75, 0.5) == pytest.approx(0.5)
    assert score_gain(0.638, 0.638) == 0.0  # exactly the constant guess
    assert score_gain(1.0, 0.2) == pytest.approx(1.0)
    assert score_gain(0.1, 0.2) == pytest.approx(-0.125)  # worse than the guess: negative
    assert score_gain(0.3, 0.0) == pytest.approx(0.3)  # no template: the score itself
    # Pri-DDX's noise-unaware decoder inverter at eps 75, k 4 (docs/results/attacks.md): 0.647 over a 0.638 guess.
    assert score_gain(0.647, 0.638) == pytest.approx(0.009 / 0.362)


def test_score_gain_errors():
    with pytest.raises(ValueError, match="reference is 1.0"):
        score_gain(1.0, 1.0)
    with pytest.raises(ValueError, match="score must be a number in \\[0, 1\\], got 1.5"):
        score_gain(1.5, 0.2)
    with pytest.raises(ValueError, match="reference must be a number in \\[0, 1\\], got nan"):
        score_gain(0.5, math.nan)
    with pytest.raises(ValueError, match="got True"):
        score_gain(True, 0.2)


# --------------------------------------------------------------------------------------------------- BLEU
BLEU_HYP = ["The cat sat on the mat.", "A dog ran"]
BLEU_REF = ["the cat is on the mat", "The dog ran away!"]
# Clipped n-gram matches / hypothesis n-grams, summed over the two sentences:
#   1-grams: hyp1 the,the,cat,on,mat of 6 (sat missing) + hyp2 dog,ran of 3         -> p1 = 7/9
#   2-grams: "the cat","on the","the mat" of 5 + "dog ran" of 2                    -> p2 = 4/7
#   3-grams: "on the mat" of 4 + none of 1 ("a dog ran")                           -> p3 = 1/5
#   4-grams: none of 3 + hyp2 has no 4-gram                                        -> p4 = 0/3
# c = 6 + 3 = 9, r = 6 + 4 = 10 -> BP = exp(1 - 10/9) = exp(-1/9)
BP = math.exp(-1 / 9)


def test_bleu_hand_values_each_smoothing():
    plain = corpus_bleu(BLEU_HYP, BLEU_REF)
    assert plain.precisions == pytest.approx((7 / 9, 4 / 7, 1 / 5, 0.0))
    assert (plain.hypothesis_length, plain.reference_length) == (9, 10)
    assert plain.brevity_penalty == pytest.approx(BP)
    assert plain.score == 0.0  # no 4-gram match and no smoothing
    # epsilon (Chen & Cherry method 1): p4 = 0.1/3; product 7/9 * 4/7 * 1/5 * 1/30 = 2/675
    eps = corpus_bleu(BLEU_HYP, BLEU_REF, smoothing="epsilon")
    assert eps.precisions[3] == pytest.approx(0.1 / 3)
    assert eps.score == pytest.approx(BP * (2 / 675) ** 0.25)
    # add1 (method 2) for n >= 2: p2 = 5/8, p3 = 2/6, p4 = 1/4; product 7/9 * 5/8 * 1/3 * 1/4 = 35/864
    add1 = corpus_bleu(BLEU_HYP, BLEU_REF, smoothing="add1")
    assert add1.precisions == pytest.approx((7 / 9, 5 / 8, 1 / 3, 1 / 4))
    assert add1.score == pytest.approx(BP * (35 / 864) ** 0.25)
    # BLEU-3 without smoothing: BP * (7/9 * 4/7 * 1/5)^(1/3) = BP * (4/45)^(1/3)
    assert corpus_bleu(BLEU_HYP, BLEU_REF, max_n=3).score == pytest.approx(BP * (4 / 45) ** (1 / 3))


def test_bleu_clipping_multiple_references_papineni():
    # Papineni's example: 7 x "the"; "the" occurs at most 2 times in a reference -> p1 = 2/7
    # hypothesis length 7, reference lengths 6 and 7 -> closest r = 7, BP = 1
    refs = [["The cat is on the mat.", "There is a cat on the mat."]]
    got = corpus_bleu(["the the the the the the the"], refs, max_n=1)
    assert got.precisions == pytest.approx((2 / 7,))
    assert (got.reference_length, got.brevity_penalty) == (7, 1.0)
    assert got.score == pytest.approx(2 / 7)


def test_bleu_brevity_penalty_tie_takes_shorter_reference():
    # hypothesis 5 tokens, references of 4 and 6 tokens: both 1 away -> r = 4 < c = 5 -> BP = 1
    got = corpus_bleu(["a b c d e"], [["a b c d", "a b c d e f"]], max_n=1)
    assert (got.reference_length, got.brevity_penalty, got.score) == (4, 1.0, 1.0)
    # a 2-token hypothesis of a 4-token reference: p1 = 1, BP = exp(1 - 4/2) = exp(-1)
    assert corpus_bleu(["a b"], ["a b c d"], max_n=1).score == pytest.approx(math.exp(-1))


def test_bleu_agrees_with_nltk_when_all_hypotheses_have_four_tokens():
    from nltk.translate.bleu_score import SmoothingFunction
    from nltk.translate.bleu_score import corpus_bleu as nltk_bleu

    hyps = ["the cat sat on the mat", "a dog ran down the road", "one two three four"]
    refs = [["the cat is on the mat", "a cat sat on a mat"], ["the dog ran down a road"], ["one two three four five"]]
    tok_h = [normalized_tokens(h) for h in hyps]
    tok_r = [[normalized_tokens(r) for r in rs] for rs in refs]
    sf = SmoothingFunction()
    for name, fn in (("epsilon", sf.method1), ("add1", sf.method2)):
        want = nltk_bleu(tok_r, tok_h, smoothing_function=fn)
        assert corpus_bleu(hyps, refs, smoothing=name).score == pytest.approx(want)


def test_bleu_degenerate_and_errors():
    assert corpus_bleu(["x y z w"], ["a b c d"], smoothing="add1").score == 0.0  # no unigram match
    assert corpus_bleu([""], ["a b"]).score == 0.0  # c = 0 -> BP = 0
    assert corpus_bleu(["a b c d"], ["a b c d"]).score == pytest.approx(1.0)
    # no 3- or 4-gram anywhere: totals 0 count as 1 -> epsilon gives p3 = p4 = 0.1/1, score (1*1*0.1*0.1)^(1/4)
    short = corpus_bleu(["a b"], ["a b"], smoothing="epsilon")
    assert short.precisions == pytest.approx((1.0, 1.0, 0.1, 0.1)) and short.score == pytest.approx(0.01**0.25)
    with pytest.raises(ValueError, match="smoothing must be one of"):
        corpus_bleu(["a"], ["a"], smoothing="add-2")
    with pytest.raises(ValueError, match="max_n must be a positive integer, got 0"):
        corpus_bleu(["a"], ["a"], max_n=0)
    with pytest.raises(ValueError, match="same length, got 1 and 2"):
        corpus_bleu(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="hypothesis 0 has no reference"):
        corpus_bleu(["a"], [[]])
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        corpus_bleu(["a"], ["a"], smoothing="epsilon", epsilon=0.0)


# --------------------------------------------------------------------------------------- attribute recall
def test_attribute_recall_text_and_sets():
    # record 0: "fever" and "dry cough" both contained in the text -> 2/2; record 1: predicted {itch}, gold rash -> 0/1
    # micro = 2/3, macro = (1 + 0) / 2
    got = attribute_recall([["fever", "dry cough"], ["rash"]], ["Fever and a dry, cough.", {"itch"}])
    assert got == {"micro": pytest.approx(2 / 3), "macro": 0.5, "n_records": 2, "n_gold": 3}


def test_attribute_recall_word_boundaries_duplicates_and_empty_records():
    # "pain" is not in "painful"; "Fever"/"fever." are one gold unit; the empty record counts in neither average
    # record 0: 0/1 ; record 1: {fever} found among predictions -> 1/1 ; record 2: no gold
    got = attribute_recall([["pain"], ["Fever", "fever."], []], ["painful knee", ["FEVER"], "anything"])
    assert got == {"micro": 0.5, "macro": 0.5, "n_records": 2, "n_gold": 2}
    # contiguous: "cough dry" does not contain "dry cough"
    assert attribute_recall([["dry cough"]], ["cough dry"])["micro"] == 0.0
    # Chinese written without spaces: 发烧 is contained in 病人发烧了
    assert attribute_recall([["发烧"]], ["病人发烧了"])["micro"] == 1.0
    nothing = attribute_recall([[]], ["text"])
    assert math.isnan(nothing["micro"]) and math.isnan(nothing["macro"]) and nothing["n_gold"] == 0


def test_attribute_recall_errors():
    with pytest.raises(ValueError, match="same number of records, got 1 and 2"):
        attribute_recall([["a"]], ["a", "b"])
    with pytest.raises(ValueError, match="no records"):
        attribute_recall([], [])
    with pytest.raises(ValueError, match=r"gold\[0\]: '\.\.\.' is empty after normalisation"):
        attribute_recall([["..."]], ["a"])
    with pytest.raises(ValueError, match="not the single string 'fever'"):
        attribute_recall(["fever"], ["fever"])


# ---------------------------------------------------------------------------------------- multi-label PRF
PRED = [{"a", "b"}, {"c"}]
GOLD = [{"a"}, {"a", "c", "d"}]
# record 0: TP a, FP b ; record 1: TP c, FN a, FN d
# micro: TP 2, FP 1, FN 2 -> P = 2/3, R = 2/4, F1 = 2 * (2/3)(1/2) / (7/6) = 4/7
# per label (P, R, F1): a (1, 1/2, 2/3), b (0, 0, 0), c (1, 1, 1), d (0, 0, 0) -> macro (1/2, 3/8, 5/12)


def test_multilabel_prf_hand_values():
    assert multilabel_prf(PRED, GOLD) == pytest.approx((2 / 3, 1 / 2, 4 / 7))
    assert multilabel_prf(PRED, GOLD, average="macro") == pytest.approx((1 / 2, 3 / 8, 5 / 12))


def test_multilabel_prf_indicator_matrices():
    # columns a, b, c, d
    pred = np.array([[1, 1, 0, 0], [0, 0, 1, 0]])
    gold = torch.tensor([[1, 0, 0, 0], [1, 0, 1, 1]])
    assert multilabel_prf(pred, gold) == pytest.approx((2 / 3, 1 / 2, 4 / 7))
    assert multilabel_prf(pred, gold, average="macro") == pytest.approx((1 / 2, 3 / 8, 5 / 12))


def test_multilabel_prf_zero_division_and_errors():
    assert multilabel_prf([set()], [{"x"}]) == (0.0, 0.0, 0.0)  # no prediction: P = 0 by convention, R = 0
    assert multilabel_prf([set()], [set()], average="macro") == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="average must be 'micro' or 'macro', got 'weighted'"):
        multilabel_prf(PRED, GOLD, average="weighted")
    with pytest.raises(ValueError, match="same number of records, got 2 and 1"):
        multilabel_prf(PRED, GOLD[:1])
    with pytest.raises(ValueError, match=r"predicted\[0\] must be a collection of labels"):
        multilabel_prf(["ab"], [{"a"}])
    with pytest.raises(ValueError, match="2-D 0/1 indicator matrix, got shape"):
        multilabel_prf(np.array([[0.5, 1.0]]), np.array([[1, 0]]))


# ------------------------------------------------------------------------------------------- PII recovery
def test_best_window_similarity_hand_value():
    # "john smith" (10 chars) vs window "jon smith" (9): matching blocks "jo" + "n smith" = 9 chars -> 2*9/19
    assert best_window_similarity("John Smith", "patient jon smith, 42") == pytest.approx(18 / 19)
    assert best_window_similarity("555-1234", "call 555 1234 now") == 1.0  # contained after normalisation
    assert best_window_similarity("Paris", "") == 0.0
    # windows one token shorter / longer than the unit:
    # "mary ann lee" (12 chars) vs the 2-token text "maryann lee" (11): "mary" + "ann lee" = 11 -> 22/23
    assert best_window_similarity("Mary Ann Lee", "maryann lee") == pytest.approx(22 / 23)
    # "new york" (8) vs 3-token window "new yo rk" (9): "new yo" + "rk" = 8 -> 16/17 (2-token "new yo": 12/14)
    assert best_window_similarity("New York", "new yo rk city") == pytest.approx(16 / 17)
    with pytest.raises(ValueError, match="empty after normalisation"):
        best_window_similarity("--", "a")


def test_pii_recovery_hand_values():
    units = [["John Smith", "555-1234"], ["Paris"]]
    recs = ["patient jon smith called 555 1234", "lives in london"]
    seen = []

    def judge(unit, rec):
        seen.append((unit, rec))
        return unit == "Paris"

    got = pii_recovery(units, recs, judge=judge)
    # exact: record 0 finds only "555 1234" (1/2), record 1 nothing (0/1) -> micro 1/3, macro 1/4
    assert got["exact"] == {"micro": pytest.approx(1 / 3), "macro": 0.25}
    # fuzzy (0.8): "john smith" ~ "jon smith" = 18/19 -> record 0 2/2; "paris" vs london/lives/in < 0.8 -> 0/1
    assert got["fuzzy"] == {"micro": pytest.approx(2 / 3), "macro": 0.5}
    # judge: only "Paris" -> record 0 0/2, record 1 1/1 -> micro 1/3, macro 1/2; it saw the raw strings
    assert got["judge"] == {"micro": pytest.approx(1 / 3), "macro": 0.5}
    assert sorted(seen) == sorted([("John Smith", recs[0]), ("555-1234", recs[0]), ("Paris", recs[1])])
    assert (got["n_units"], got["n_records"]) == (3, 2)
    # threshold 1.0: fuzzy is exact; just above 18/19 the near-miss no longer counts
    assert pii_recovery(units, recs, threshold=1.0)["fuzzy"] == got["exact"]
    assert pii_recovery(units, recs, threshold=0.95)["fuzzy"]["micro"] == pytest.approx(1 / 3)
    assert "judge" not in pii_recovery(units, recs)


def test_pii_recovery_errors():
    for bad in (0.0, 1.5, float("nan"), "0.8"):
        with pytest.raises(ValueError, match="threshold must be in"):
            pii_recovery([["a"]], ["a"], threshold=bad)
    with pytest.raises(ValueError, match="same number of records, got 2 and 1"):
        pii_recovery([["a"], ["b"]], ["a"])
    with pytest.raises(ValueError, match=r"reconstructions\[0\] must be a string"):
        pii_recovery([["a"]], [None])


# -------------------------------------------------------------------------------------- empirical privacy
def test_empirical_privacy():
    assert empirical_privacy(0.25) == 0.75
    assert empirical_privacy(0) == 1.0 and empirical_privacy(1.0) == 0.0
    assert empirical_privacy(np.float32(0.5)) == 0.5
    for bad in (1.5, -0.1, float("nan"), "0.5", True):
        with pytest.raises(ValueError, match="attack_success"):
            empirical_privacy(bad)


# ------------------------------------------------------------------------------------- KSG mutual information
def test_ksg_hand_value_four_points():
    # (x, y) = A(0,0) B(1,2) C(3,3) D(6,7), k = 1, max-norm joint distances:
    #   AB 2, AC 3, AD 7, BC 2, BD 5, CD 4 -> eps = A 2, B 2, C 2, D 4
    # others strictly closer than eps in x alone / y alone:
    #   A: x {B}, y {} ; B: x {A} (C at 2 not < 2), y {C} ; C: x {}, y {B} ; D: x {C}, y {} (C at 4 not < 4)
    # I = psi(1) + psi(4) - (5 psi(2) + 3 psi(1)) / 4 = 11/6 - 5/4 = 7/12  (psi(1) = -g, psi(2) = 1-g, psi(4) = 11/6-g)
    x, y = [0.0, 1.0, 3.0, 6.0], [0.0, 2.0, 3.0, 7.0]
    assert digamma(1) + digamma(4) - (5 * digamma(2) + 3 * digamma(1)) / 4 == pytest.approx(7 / 12)
    assert ksg_mutual_information(x, y, k=1) == pytest.approx(7 / 12)
    assert ksg_mutual_information(torch.tensor(x)[:, None], np.array(y)[:, None], k=1) == pytest.approx(7 / 12)


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_ksg_bivariate_gaussian(rho):
    # true I = -0.5 log(1 - rho^2) nats: 0, 0.1438, 0.8304
    rng = np.random.default_rng(0)
    z = rng.multivariate_normal([0.0, 0.0], [[1.0, rho], [rho, 1.0]], size=2000)
    assert ksg_mutual_information(z[:, 0], z[:, 1], k=3) == pytest.approx(-0.5 * math.log(1 - rho**2), abs=0.05)


def test_ksg_independent_and_multidimensional():
    rng = np.random.default_rng(1)
    assert abs(ksg_mutual_information(rng.normal(size=(2000, 2)), rng.normal(size=(2000, 3)))) < 0.05
    # two independent pairs, each with rho = 0.5: I = 2 * 0.5 * log(1/0.75) = 0.2877
    a, b = rng.normal(size=(2, 2000, 2))
    x, y = a, 0.5 * a + math.sqrt(0.75) * b
    assert ksg_mutual_information(x, y) == pytest.approx(-math.log(0.75), abs=0.05)


def test_ksg_errors():
    with pytest.raises(ValueError, match=r"same number of samples, got shapes \(3, 1\) and \(2, 1\)"):
        ksg_mutual_information([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, n - 1\] = \[1, 2\], got 3"):
        ksg_mutual_information([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], k=3)
    with pytest.raises(ValueError, match="must be \\[n\\] or \\[n, d\\], got shape"):
        ksg_mutual_information(np.zeros((2, 2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="NaN or infinite"):
        ksg_mutual_information([1.0, float("nan"), 3.0], [1.0, 2.0, 3.0], k=1)
    with pytest.raises(ValueError, match="exact duplicates"):
        ksg_mutual_information([1.0, 1.0, 3.0], [2.0, 2.0, 5.0], k=1)


# ------------------------------------------------------------------------- SnD's Kozachenko-Leonenko MI (A.6)
@pytest.mark.parametrize(("d", "sx", "n"), [(1, 1.0, 20_000), (2, 2.0, 10_000), (4, 1.0, 10_000)])
def test_kl_mi_gaussian_signal_plus_noise(d, sx, n):
    # X ~ N(0, sx^2 I_d), Z ~ N(0, I_d) independent: I(X; X + Z) = 0.5 d log(1 + sx^2) nats
    # (0.3466, 1.6094, 1.3863). Seed 0; over seeds 0-4 the estimates lie within 0.04 of the truth, so abs=0.08.
    rng = np.random.default_rng(0)
    x, z = rng.normal(scale=sx, size=(n, d)), rng.normal(size=(n, d))
    truth = 0.5 * d * math.log(1 + sx**2)
    assert kl_mutual_information(x + z, z, k=1) == pytest.approx(truth, abs=0.08)


def test_kl_mi_is_eq22_by_hand():
    # x_tilde = [0, 1, 3] (1-NN distances 1, 1, 2), z = [0, 2, 3] (2, 1, 1): d/N * (sum log eps_xt - sum log eps_z)
    # = 1/3 * (log 2 - log 2) = 0; scale z by 1/2: eps_z halve, I rises by d * log 2.
    assert kl_mutual_information([0.0, 1.0, 3.0], [0.0, 2.0, 3.0]) == pytest.approx(0.0, abs=1e-12)
    assert kl_mutual_information([0.0, 1.0, 3.0], [0.0, 1.0, 1.5]) == pytest.approx(math.log(2))
    # d = 2, k = 2 on the corners of squares of side 2 and 1: every 2nd-NN distance is 2 (resp. 1): I = 2 log 2
    sq = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    assert kl_mutual_information(2 * sq, sq, k=2) == pytest.approx(2 * math.log(2))


def test_kl_mi_independent_noise_only_is_about_zero():
    # X = 0: x_tilde and z are both N(0, I_3) samples (independent draws), so I = 0; tolerance 0.1 at N = 5000
    rng = np.random.default_rng(3)
    assert abs(kl_mutual_information(rng.normal(size=(5000, 3)), rng.normal(size=(5000, 3)))) < 0.1


def test_kl_mi_accepts_torch_and_errors():
    t = torch.tensor([[0.0], [1.0], [3.0]])
    assert kl_mutual_information(t, t) == pytest.approx(0.0)
    with pytest.raises(ValueError, match=r"same number of samples and dimension, got shapes \(3, 1\) and \(2, 1\)"):
        kl_mutual_information([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"same number of samples and dimension"):
        kl_mutual_information(np.zeros((3, 2)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, N - 1\] = \[1, 2\], got 3"):
        kl_mutual_information([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], k=3)
    with pytest.raises(ValueError, match=r"k must be an integer"):
        kl_mutual_information([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], k=True)
    with pytest.raises(ValueError, match="kl_mutual_information: x_tilde must be"):
        kl_mutual_information(np.zeros((2, 2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="kl_mutual_information: z contains NaN"):
        kl_mutual_information([1.0, 2.0, 3.0], [1.0, float("inf"), 3.0])
    with pytest.raises(ValueError, match="samples of z have k=1 exact duplicates"):
        kl_mutual_information([1.0, 2.0, 4.0], [2.0, 2.0, 5.0])
