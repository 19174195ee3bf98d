"""The clean-text reference of an attribute verdict: does the *unprivatized* text carry the attribute at all?

A plain reader of the clean text (scikit-learn's TF-IDF features and a logistic regression per attribute; one-vs-rest
for multi-label attributes), trained on the attacker's training texts and scored on the evaluated ones with the same
:func:`~textfree.attacks.attributes.score_attributes` as the attackers. Its regularisation is chosen on the attacker's
validation part, as the attackers are. Where it scores no better than the prior, the text has no signal this simple
reader finds, and an attack on the release that also scores at the prior says little about the mechanism: "the
mechanism hides gender" and "this text has no gender signal" then read the same.

It needs no threat model: it is not an attack on a release but a property of the data (an upper reference for a
reader of the same size as the attackers, not a bound: a stronger reader of clean text may find more).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .attributes import AttributeSpec, attribute_values, score_attributes, selection_metric

__all__ = ["CLEAN_TEXT_C", "clean_text_predictions", "clean_text_reference"]

#: Inverse regularisation strengths tried; the one with the best validation score is kept, per attribute.
CLEAN_TEXT_C = (0.3, 3.0, 30.0)


def _features(train: Sequence[str], *others: Sequence[str]):
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1, max_features=50_000)
    return vectorizer.fit_transform(train), [vectorizer.transform(o) for o in others]


def _fit_predict(spec: AttributeSpec, x, values: list, xs: list, c: float) -> list[list[Any]]:
    """Predictions of one attribute for each matrix of ``xs``, from a model fit on ``x`` with ``values``."""
    from sklearn.linear_model import LogisticRegression

    if spec.kind == "categorical":
        if len(set(values)) < 2:  # one class in training: the constant guess
            return [[values[0]] * m.shape[0] for m in xs]
        model = LogisticRegression(C=c, max_iter=2000).fit(x, values)
        return [list(model.predict(m)) for m in xs]
    out: list[list[list[str]]] = [[[] for _ in range(m.shape[0])] for m in xs]
    for label in spec.classes:
        y = [label in v for v in values]
        if all(y) or not any(y):  # a label in every training row, or in none: the constant guess
            hits = [[all(y)] * m.shape[0] for m in xs]
        else:
            model = LogisticRegression(C=c, max_iter=2000).fit(x, y)
            hits = [list(model.predict_proba(m)[:, 1] > 0.5) for m in xs]
        for rows, flags in zip(out, hits):
            for row, hit in zip(rows, flags):
                if hit:
                    row.append(label)
    return out


def clean_text_predictions(
    specs: Sequence[AttributeSpec],
    train_texts: Sequence[str],
    train_targets: Sequence[Mapping[str, Any]],
    validation_texts: Sequence[str],
    validation_targets: Sequence[Mapping[str, Any]],
    test_texts: Sequence[str],
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Per evaluated text, the clean-text reader's guess of every attribute; and the C chosen per attribute (on the
    validation part: accuracy, or micro F1 for multi-label attributes)."""
    if not train_texts or not test_texts:
        raise ValueError("clean_text_predictions: needs training and evaluated texts")
    x, (xv, xt) = _features(list(train_texts), list(validation_texts) or list(train_texts[:1]), list(test_texts))
    rows: list[dict[str, Any]] = [{} for _ in test_texts]
    chosen: dict[str, float] = {}
    for spec in specs:
        values = attribute_values(train_targets, spec.name, spec.kind)
        best = None
        for c in CLEAN_TEXT_C:
            val, test = _fit_predict(spec, x, values, [xv, xt], c)
            if validation_targets:
                score = score_attributes([spec], [{spec.name: v} for v in val], validation_targets)
                value = score[selection_metric(spec)]
            else:
                value = 0.0
            if best is None or value > best[0]:
                best = (value, c, test)
            if not validation_targets:
                break
        assert best is not None
        chosen[spec.name] = best[1]
        for row, v in zip(rows, best[2]):
            row[spec.name] = v
    return rows, chosen


def clean_text_reference(
    specs: Sequence[AttributeSpec],
    train_texts: Sequence[str],
    train_targets: Sequence[Mapping[str, Any]],
    validation_texts: Sequence[str],
    validation_targets: Sequence[Mapping[str, Any]],
    test_texts: Sequence[str],
    test_targets: Sequence[Mapping[str, Any]],
) -> dict[str, float]:
    """:func:`~textfree.attacks.attributes.score_attributes` of :func:`clean_text_predictions` on the evaluated
    texts: the scores a TF-IDF + logistic-regression reader of the *clean* text gets."""
    predicted, _ = clean_text_predictions(
        specs, train_texts, train_targets, validation_texts, validation_targets, test_texts
    )
    return score_attributes(specs, predicted, test_targets)
