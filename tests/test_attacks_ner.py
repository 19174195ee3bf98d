"""The NER attack on T2T / PCT2T text (RAPT IV-A3): BIO tags from character spans and back, entity-level F1 by hand,
gold spans carried through privatization word for word, a tiny tagger trained through the shared loop, and the
``ner_attack`` cell kind end to end.

The fixture ``fixtures/ner/presidio-synth/synth_dataset_v2.json`` holds 40 synthetic sentences (10 templates x 4
fills; PERSON, GPE, ORGANIZATION, PHONE_NUMBER) in the Presidio format; nothing in it is real.
"""

from pathlib import Path

import pytest
import torch

from textfree.attacks import ThreatModel, ThreatModelError
from textfree.attacks.ner import (
    EntityCounts,
    NerTagger,
    NerTrainConfig,
    bio_labels,
    bio_to_spans,
    char_spans_to_words,
    entity_survival,
    entity_unprotected,
    group_split,
    ner_attack,
    read_spans,
    score_entities,
    spans_to_bio,
    train_ner_tagger,
    word_offsets,
    word_spans_to_chars,
)
from textfree.substitution import TextToText, WordEmbeddingTable, split_text

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ner" / "presidio-synth"
PUBLIC = ThreatModel(training_text="public")

TEXT = "Call Ann Lee at 555-0100, or mail ann.lee@example.com!"
SPANS = [(5, 12, "PERSON"), (16, 24, "PHONE_NUMBER"), (34, 53, "EMAIL_ADDRESS")]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: the tiny models train faster without thread hand-offs on a shared 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_bio_tags_from_character_spans_and_back():
    words = split_text(TEXT)[1::2]
    offsets = word_offsets(TEXT)
    assert [TEXT[a:b] for a, b in offsets] == words
    spans = char_spans_to_words(offsets, SPANS)
    assert spans == [(1, 3, "PERSON"), (4, 7, "PHONE_NUMBER"), (10, 17, "EMAIL_ADDRESS")]
    tags = spans_to_bio(len(words), spans)
    assert tags == [
        "O",
        "B-PERSON",
        "I-PERSON",
        "O",
        "B-PHONE_NUMBER",
        "I-PHONE_NUMBER",
        "I-PHONE_NUMBER",
        "O",
        "O",
        "O",
        "B-EMAIL_ADDRESS",
        *["I-EMAIL_ADDRESS"] * 6,
        "O",
    ]
    assert bio_to_spans(tags) == spans
    assert word_spans_to_chars(offsets, bio_to_spans(tags)) == SPANS


def test_spans_that_cut_words_overlap_or_cover_no_word():
    text = "Mr. Smithson lives  in Oslo"
    offsets = word_offsets(text)
    # a span inside a word takes the whole word; a span over whitespace only is dropped; of two overlapping spans
    # the first (then the longer) is kept
    spans = [(4, 9, "PERSON"), (18, 19, "X"), (23, 27, "GPE"), (20, 27, "LOCATION")]
    assert char_spans_to_words(offsets, spans) == [(2, 3, "PERSON"), (4, 6, "LOCATION")]
    with pytest.raises(ValueError, match="overlaps"):
        spans_to_bio(6, [(0, 2, "A"), (1, 3, "B")])
    with pytest.raises(ValueError, match="outside 3 words"):
        spans_to_bio(3, [(2, 4, "A")])


def test_bio_reading_of_adjacent_types_and_stray_inside_tags():
    tags = ["B-PER", "B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-PER"]
    assert bio_to_spans(tags) == [(0, 1, "PER"), (1, 3, "PER"), (4, 6, "LOC"), (6, 7, "LOC"), (7, 8, "PER")]
    assert bio_to_spans([]) == [] and bio_to_spans(["O", "O"]) == []
    with pytest.raises(ValueError, match="'X-PER' at word 1"):
        bio_to_spans(["O", "X-PER"])
    assert bio_labels(["PER", "LOC"]) == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    for bad in ([], ["PER", "PER"], ["O"], ["B-PER"]):
        with pytest.raises(ValueError):
            bio_labels(bad)


def test_entity_and_span_f1_by_hand():
    original = [["Ann", "met", "Bob", "in", "Oslo"], ["Call", "Eve", "at", "555"]]
    released = [["ann", "met", "cat", "in", "Oslo"], ["Call", "dog", "at", "555"]]
    gold = [[(0, 1, "PER"), (2, 3, "PER"), (4, 5, "LOC")], [(1, 2, "PER"), (3, 4, "PHONE")]]
    predicted = [[(0, 1, "PER"), (2, 3, "PER"), (4, 5, "PER")], [(3, 4, "PHONE"), (0, 1, "PER")]]
    s = score_entities(gold, predicted, original, released)
    # positions and types: (0,1,PER), (2,3,PER), (3,4,PHONE) match -> 3 of 5 predicted, 3 of 5 gold
    assert s.span == EntityCounts(3, 5, 5) and s.span.f1 == pytest.approx(0.6)
    # words too: "ann" == "Ann" (case-insensitive) and "555" survive; "cat" != "Bob"
    assert s.entity == EntityCounts(2, 5, 5) and s.entity.f1 == pytest.approx(0.4)
    assert (s.entity.precision, s.entity.recall) == (pytest.approx(0.4), pytest.approx(0.4))
    uneven = score_entities([[(0, 1, "PER")]], [[(0, 1, "PER"), (1, 2, "PER")]], [["a", "b"]], [["a", "b"]])
    assert uneven.entity.f1 == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert EntityCounts(0, 0, 0).f1 == 0.0 and EntityCounts(0, 3, 0).precision == 0.0
    # gold entities whose words all come out unchanged: Ann, Oslo, 555 of 5
    assert entity_survival(gold, original, released) == pytest.approx(3 / 5)
    assert entity_unprotected(gold, [[True, True, True, True, False], [True, True, True, False]]) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="T2T keeps the count"):
        score_entities(gold, predicted, original, [released[0], released[1][:3]])


def test_group_split_holds_groups_out_whole_and_is_seeded():
    groups = [i % 7 for i in range(40)]
    train, held = group_split(groups, 0.3, generator=torch.Generator().manual_seed(0))
    assert sorted(train + held) == list(range(40))
    assert not {groups[i] for i in train} & {groups[i] for i in held}
    assert len({groups[i] for i in held}) == 2  # round(0.3 * 7)
    assert group_split(groups, 0.3, generator=torch.Generator().manual_seed(0)) == (train, held)
    others = {tuple(group_split(groups, 0.3, generator=torch.Generator().manual_seed(s))[1]) for s in range(1, 6)}
    assert len(others | {tuple(held)}) > 1
    with pytest.raises(ValueError, match="heldout must be a number in \\(0, 1\\), got 1.0"):
        group_split(groups, 1.0, generator=torch.Generator())
    with pytest.raises(ValueError, match="at least 2 distinct groups"):
        group_split([1, 1], 0.5, generator=torch.Generator())


class _LookupTagger:
    """A tagger from a word list: names and places NOUN, digits NUM, the rest ADP (context-free)."""

    name = "lookup"
    nouns = {"ann", "lee", "paris", "oslo", "bob", "cat", "dog", "tree"}

    def tag(self, words):
        return self.tag_isolated(words)

    def tag_isolated(self, words):
        return ["NUM" if w.isdigit() else "NOUN" if w.lower() in self.nouns else "ADP" for w in words]


@pytest.fixture(scope="module")
def small_table():
    words = ["call", "ann", "lee", "at", "in", "paris", "oslo", "bob", "cat", "dog", "tree", "to", "from", "-", "."]
    return WordEmbeddingTable(words, torch.randn(len(words), 8, generator=torch.Generator().manual_seed(3)))


def test_gold_spans_map_through_privatization_word_for_word(small_table):
    texts = ["Call Ann Lee at 555-0100 in Paris.", "Bob flew from Oslo to Kyiv."]
    char_spans = [SPANS[:2] + [(28, 33, "GPE")], [(0, 3, "PERSON"), (14, 18, "GPE"), (22, 26, "GPE")]]
    gold = [char_spans_to_words(word_offsets(t), s) for t, s in zip(texts, char_spans)]
    original = [split_text(t)[1::2] for t in texts]
    mech = TextToText(small_table, 1e6)
    same = mech.privatize_detailed(texts, generator=torch.Generator().manual_seed(0))
    assert [len(w) for w in same.output_words] == [len(w) for w in original]
    # huge eta: table words come back as spelled in the table (lower case), the rest verbatim
    assert read_spans(same.output_words[0], gold[0]) == [("ann", "lee"), ("555", "-", "0100"), ("paris",)]
    assert entity_survival(gold, original, same.output_words) == 1.0
    noisy = mech.with_eta(0.01).privatize_detailed(texts, generator=torch.Generator().manual_seed(0))
    read = [split_text(t)[1::2] for t in noisy.texts]  # the released text splits into the same words
    assert read == noisy.output_words
    # digits and "Kyiv" are outside the table: released verbatim, never privatized
    assert (read[0][4], read[0][6], read[1][5]) == ("555", "0100", "Kyiv")
    assert entity_unprotected(gold, noisy.privatized) == pytest.approx(1 / 6)
    assert entity_survival(gold, original, read) < 1.0
    # PCT2T privatizes nouns only: the other words (at, in, to, punctuation) are sent as they are
    pct = TextToText(small_table, 0.01, pos_categories=("NOUN",), tagger=_LookupTagger())
    out = pct.privatize_detailed(texts, generator=torch.Generator().manual_seed(0))
    for words, released, flags in zip(original, out.output_words, out.privatized):
        for w, r, f in zip(words, released, flags):
            assert f == (w.lower() in _LookupTagger.nouns)
            if not f:
                assert r == w


def _fixture_examples():
    from textfree.data import load_dataset

    records = load_dataset(FIXTURE)
    words = [split_text(r.text)[1::2] for r in records]
    gold = [char_spans_to_words(word_offsets(r.text), r.spans) for r in records]
    return words, gold, sorted({label for r in records for *_, label in r.spans})


def test_tagger_labels_the_first_sub_token_of_each_word(tiny_encoder_dir):
    tagger = NerTagger.from_encoder(str(tiny_encoder_dir), ["PERSON"], max_tokens=16)
    enc = tagger.encode(["Koskikatu", "is", "here"], ["B-PERSON", "O", "O"])
    assert enc["word_ids"][0] == -1 and enc["word_ids"][-1] == -1  # [CLS], [SEP]
    n_first = enc["word_ids"].count(0)
    assert n_first > 1  # the name splits into several sub-tokens
    assert enc["labels"] == [-100, 1] + [-100] * (n_first - 1) + [0, 0, -100]
    long = tagger.encode(["word"] * 40)
    assert len(long["input_ids"]) == 16  # cut to max_tokens; the words past it are tagged O
    assert tagger.predict_tags([["word"] * 40])[0][20:] == ["O"] * 20
    with pytest.raises(ValueError, match="not among the tagger's labels"):
        tagger.encode(["a"], ["B-GPE"])


def test_tagger_trained_through_the_loop_learns_its_texts_and_reloads(tiny_encoder_dir, tmp_path):
    words, gold, types = _fixture_examples()
    cfg = NerTrainConfig(
        out=str(tmp_path / "run"), encoder=str(tiny_encoder_dir), entity_types=types, epochs=10, batch_size=8, lr=1e-2
    )
    summary = train_ner_tagger(cfg, [(w, spans_to_bio(len(w), g)) for w, g in zip(words, gold)])
    assert summary["steps"] == 50 and summary["final_loss"] < summary["first_loss"] / 10
    tagger = summary["model"]
    predicted = ner_attack(words, tagger, threat=PUBLIC)
    assert score_entities(gold, predicted, words, words).entity.f1 > 0.9
    assert NerTagger.load(tmp_path / "run").predict(words) == predicted
    assert not (tmp_path / "run" / "checkpoints").exists()
    with pytest.raises(ThreatModelError, match="training_text='public'"):
        ner_attack(words, tagger, threat=ThreatModel())
    with pytest.raises(ValueError, match="entity type 'O'"):
        NerTrainConfig(out=str(tmp_path / "x"), entity_types=["O"])
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 4, got 2"):
        NerTrainConfig(out=str(tmp_path / "x"), entity_types=["PER"], max_tokens=2)


def _cell(encoder: Path, out: Path, **params) -> dict:
    return {
        "name": "ner_tiny",
        "kind": "ner_attack",
        "dataset": str(FIXTURE),
        "limit": 8,
        "params": {
            "eta": 1.0,
            "table": str(encoder),
            "encoder": str(encoder),
            "out": str(out),
            "epochs": 10,
            "batch_size": 8,
            "lr": 5e-3,
            "threads": 1,
            **params,
        },
        "attack": {"threat": {"training_text": "public"}},
        "grid": {"params.eta": [0.5, 1e6]},
        "seeds": [0],
    }


def _rows(path) -> dict[float, dict[str, float]]:
    from textfree.results.files import load_results

    rows = load_results(path)["results"]
    return {r["point"]["params.eta"]: {k: v["mean"] for k, v in r["metrics"].items()} for r in rows}


def test_cell_runs_end_to_end_and_reuses_its_tagger(tiny_encoder_dir, tmp_path):
    from textfree.experiments import Cell, run_cell

    cell = _cell(tiny_encoder_dir, tmp_path / "tagger")
    rows = _rows(run_cell(Cell.from_dict(cell), out_dir=tmp_path / "results"))
    low, high = rows[0.5], rows[1e6]
    assert low["n_texts"] == 8 and low["n_train_texts"] == 32 and low["reused"] == 0.0
    assert high["clean_entity_f1"] > 0.2
    # an identity release (eta 1e6) is read exactly as the clean text: the same F1
    assert high["replacement_rate"] == 0.0 and high["entity_survival"] == 1.0
    assert high["entity_f1"] == pytest.approx(high["clean_entity_f1"])
    for m in (low, high):
        assert m["empirical_privacy"] == pytest.approx(1 - m["entity_f1"])
        assert m["entity_recall"] <= m["entity_survival"] + 1e-9  # an entity is found only where its words survive
        assert m["entity_f1"] <= m["span_f1"] + 1e-9
    assert low["replacement_rate"] > 0.9 and low["entity_f1"] < high["entity_f1"]
    again = _rows(run_cell(Cell.from_dict(cell), out_dir=tmp_path / "results"))
    assert again[0.5]["reused"] == 1.0 and again[0.5]["clean_entity_f1"] == low["clean_entity_f1"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"grid": {"params.eta": [25, -1]}}, "params.eta"),
        ({"params": {"pos": ["NOUN", "BANANA"]}}, "params.pos"),
        ({"params": {"heldout": 1.5}}, "params.heldout"),
        ({"params": {"epochs": 0}}, "params.epochs"),
        ({"params": {"train_limit": "all"}}, "params.train_limit"),
        ({"params": {"lr": 0}}, "params.lr"),
        ({"params": {"encoder": ""}}, "params.encoder"),
        ({"attack": {"threat": {}}}, "attack.threat"),
        ({"mechanism": {"name": "l2_laplace", "epsilon": 10}}, "mechanism"),
        ({"dataset": None, "texts": ["a b"]}, "dataset"),
        ({"grid": {"params.eta": [1, 2], "params.epochs": [1, 2]}}, "params.out"),
    ],
)
def test_cell_validation_names_the_field(tmp_path, change, field):
    from textfree.experiments import Cell, CellError

    cell = _cell(tmp_path / "enc", tmp_path / "tagger")
    for key, value in change.items():
        if key == "params":
            cell["params"] = {**cell["params"], **value}
        else:
            cell[key] = value
    with pytest.raises(CellError) as exc:
        Cell.from_dict(cell)
    assert exc.value.field == field


@pytest.mark.shared_data
def test_presidio_spans_survive_the_bio_round_trip(shared_data):
    from textfree.data import load_dataset

    if not (shared_data / "presidio-synth").is_dir():
        pytest.skip("presidio-synth not in the shared data")
    records = load_dataset("presidio", split="synth")
    for r in records:
        offsets = word_offsets(r.text)
        tags = spans_to_bio(len(offsets), char_spans_to_words(offsets, r.spans))
        assert word_spans_to_chars(offsets, bio_to_spans(tags)) == r.spans, r.id


@pytest.mark.parametrize("name", ["ner_t2t.yaml", "ner_pct2t.yaml"])
def test_the_example_cells_load(name):
    from textfree.experiments import load_cell

    cell = load_cell(Path(__file__).resolve().parents[1] / "examples" / "cells" / "attacks" / name)
    assert cell.kind == "ner_attack" and cell.grid == {"params.eta": [25, 50, 75, 100, 150]}
    assert (cell.params.get("pos") == "default") == (name == "ner_pct2t.yaml")


def test_the_attacks_report_shows_ner_cells():
    from textfree.attacks.report import Point
    from textfree.attacks.report_ner import ner_section
    from textfree.attacks.report_payloads import PayloadCell

    values = {"entity_f1": [0.25], "empirical_privacy": [0.75], "clean_entity_f1": [0.5], "entity_survival": [0.6]}
    values |= {"n_texts": [200.0], "n_entities": [413.0], "n_train_texts": [1000.0], "word_epsilon": [58.5]}
    cell = {"name": "ner_x", "dataset": "presidio", "params": {"pos": "default"}}
    lines = ner_section([PayloadCell("ner_x", cell, [({"params.eta": 25}, Point(None, values))], "f.json", "d")])
    assert (
        "### `ner_x` (presidio, PCT2T, default; 200 held-out texts, 413 entities, tagger trained on 1000 clean texts)"
        in lines
    )
    assert "| 25 | 58.5 | – | 0.250 | – | 0.750 | 0.500 | 60.0 | – |" in lines
    assert ner_section([])[-1] == "No ner_attack result files were given."
    # a grid over the categories (RAPT Fig. 6): one release per row, named
    grid = {"name": "ner_pos", "dataset": "presidio", "params": {"pos": "default"}, "grid": {"params.pos": []}}
    points = [({"params.pos": None}, Point(None, values)), ({"params.pos": "noun"}, Point(None, values))]
    lines = ner_section([PayloadCell("ner_pos", grid, points, "f.json", "d")])
    assert any(line.startswith("### `ner_pos` (presidio, T2T or PCT2T per row;") for line in lines)
    assert "| T2T | None | 58.5 | – | 0.250 | – | 0.750 | 0.500 | 60.0 | – |" in lines
    assert "| PCT2T, noun | None | 58.5 | – | 0.250 | – | 0.750 | 0.500 | 60.0 | – |" in lines


def test_cell_reads_a_table_by_path_and_column_mapping(tiny_encoder_dir, tmp_path):
    """A file in its own layout: the PII strings of its `names` column are the entities (type PII)."""
    from textfree.experiments import Cell, CellError, run_cell

    notes = Path(__file__).parent / "fixtures" / "audit" / "notes.jsonl"
    cell = _cell(tiny_encoder_dir, tmp_path / "tagger", epochs=1, columns={"text": "note", "pii": "names"})
    cell |= {"dataset": str(notes), "grid": {"params.eta": [1e6]}, "limit": 4}
    row = _rows(run_cell(Cell.from_dict(cell), out_dir=tmp_path / "results"))[1e6]
    assert row["n_entities"] > 0 and row["n_texts"] >= 1 and row["replacement_rate"] == 0.0
    with pytest.raises(CellError, match="map a PII column") as info:
        Cell.from_dict(cell | {"params": cell["params"] | {"columns": {"text": "note"}}})
    assert info.value.field == "params.columns"
