"""The deterministic PPFT train / held-out split."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from textfree.data import DataError, load_privacyrestore, ppft_split, private_key, shared_data_dir, stable_unit_interval

FIXTURES = Path(__file__).parent / "fixtures" / "data" / "privacyrestore"
DDX_DIR = FIXTURES / "Pri-DDXPlus_dataset"
SLJA_DIR = FIXTURES / "Pri-SLJA_dataset"
_SHARED = shared_data_dir()
requires_shared_data = pytest.mark.skipif(
    _SHARED is None or not _SHARED.is_dir(), reason="../shared/data not found (set TEXTFREE_DATA)"
)


def ids(records: list) -> list[str]:
    return [r.id for r in records]


def check_invariants(split: dict, directory: Path | str) -> None:
    """Train + validation (the training side) and heldout partition dev + test by private text; dev is never held
    out."""
    dev = load_privacyrestore(directory, "dev")
    test = load_privacyrestore(directory, "test")
    train, validation, heldout = ids(split["train"]), ids(split["validation"]), ids(split["heldout"])
    side = train + validation
    assert len(set(side)) == len(side) and len(set(heldout)) == len(heldout)
    assert not set(side) & set(heldout), "train and heldout overlap"
    assert set(side) | set(heldout) == set(ids(dev)) | set(ids(test)), "split does not cover dev + test"
    assert set(ids(dev)) <= set(side), "a dev record is held out"
    assert set(heldout) <= set(ids(test))
    keys = {name: {private_key(r) for r in split[name]} for name in ("train", "validation", "heldout")}
    assert not (keys["train"] | keys["validation"]) & keys["heldout"], (
        "the same private text appears in train and heldout"
    )
    assert not keys["train"] & keys["validation"], "the same private text appears in train and validation"
    counts = split["manifest"]["counts"]
    assert (counts["train"], counts["validation"], counts["heldout"]) == (len(train), len(validation), len(heldout))
    assert counts["unique"] == len(side) + len(heldout)


def test_stable_unit_interval_is_fixed() -> None:
    # sha256("textfree-ppft-split-v1:abc"): a regression value, independent of PYTHONHASHSEED
    assert stable_unit_interval("abc") == pytest.approx(0.415494338450722, abs=1e-12)
    assert stable_unit_interval("abc") != stable_unit_interval("abc", salt="other")
    values = [stable_unit_interval(str(i)) for i in range(2000)]
    assert all(0 <= v < 1 for v in values) and 0.45 < sum(v < 0.5 for v in values) / 2000 < 0.55


def test_fixture_split_invariants_and_groups() -> None:
    split = ppft_split(DDX_DIR)
    check_invariants(split, DDX_DIR)
    train = ids(split["train"])
    assert train[:2] == ["pri-ddx-101", "pri-ddx-202"]  # dev first, in file order
    assert "pri-ddx-102" in train  # test-only row sharing dev record 101's context
    assert ("pri-ddx-303" in train) == ("pri-ddx-304" in train)  # same context -> same side
    manifest = split["manifest"]
    assert manifest["fraction"] == 0.5 and manifest["group_by"] == "context"
    assert manifest["counts"] | {} == {
        "dev": 2,
        "test": 6,
        "dev_in_test": 2,
        "unique": 6,
        "test_only": 4,
        "groups": 4,
        "groups_with_dev": 2,
        "test_only_sharing_dev_context": 1,
        "train": 5,
        "train_from_dev_groups": 3,
        "train_from_hash": 2,
        "validation": 0,
        "heldout": 1,
    }
    assert set(manifest["files_sha256"]) == {"dev.json", "test.json"}
    check_invariants(ppft_split(SLJA_DIR), SLJA_DIR)


def test_fraction_extremes_and_group_by_id() -> None:
    none = ppft_split(DDX_DIR, fraction=0.0)
    assert ids(none["train"]) == ["pri-ddx-101", "pri-ddx-202", "pri-ddx-102"]
    assert len(ppft_split(DDX_DIR, fraction=1.0)["heldout"]) == 0
    by_id = ppft_split(DDX_DIR, fraction=0.0, group_by="id")
    assert ids(by_id["train"]) == ["pri-ddx-101", "pri-ddx-202"]  # no grouping: 102 may be held out
    with pytest.raises(ValueError):
        ppft_split(DDX_DIR, fraction=1.5)
    with pytest.raises(ValueError):
        ppft_split(DDX_DIR, group_by="order")  # type: ignore[arg-type]
    with pytest.raises(DataError):
        ppft_split(DDX_DIR / "dev.json")


def test_validation_is_carved_from_train_by_group_and_leaves_heldout_alone() -> None:
    base = ppft_split(DDX_DIR)
    assert base["validation"] == [] and base["manifest"]["validation"] == 0.0
    for v in (0.3, 0.6, 0.9):
        split = ppft_split(DDX_DIR, validation=v)
        check_invariants(split, DDX_DIR)
        assert ids(split["heldout"]) == ids(base["heldout"])  # held-out membership never changes
        assert sorted(ids(split["train"]) + ids(split["validation"])) == sorted(ids(base["train"]))
        keys = {private_key(r) for r in base["train"]}  # the rule, recomputed by hand
        assert {private_key(r) for r in split["validation"]} == {
            k for k in keys if stable_unit_interval(k, "textfree-ppft-split-v1:validation") < v
        }
    assert ("pri-ddx-101" in ids(split["validation"])) == ("pri-ddx-102" in ids(split["validation"]))  # one context
    assert ids(ppft_split(DDX_DIR, validation=0.6)["validation"]) == ids(
        ppft_split(DDX_DIR, validation=0.6)["validation"]
    )
    for bad in (1.0, -0.1, True, "0.2"):
        with pytest.raises(ValueError, match="validation must be a number in \\[0, 1\\)"):
            ppft_split(DDX_DIR, validation=bad)


@pytest.mark.shared_data
@requires_shared_data
def test_real_validation_part_of_pri_ddx() -> None:
    split = ppft_split("ddx", validation=0.2)
    assert (len(split["train"]), len(split["validation"]), len(split["heldout"])) == (773, 194, 582)
    check_invariants(split, "ddx")


def test_split_is_deterministic_and_order_independent(tmp_path: Path) -> None:
    first, second = ppft_split(DDX_DIR), ppft_split(DDX_DIR)
    assert ids(first["train"]) == ids(second["train"]) and ids(first["heldout"]) == ids(second["heldout"])
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    for name in ("dev.json", "test.json"):
        lines = (DDX_DIR / name).read_text(encoding="utf-8").splitlines()
        (shuffled / name).write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    reordered = ppft_split(shuffled)
    assert set(ids(reordered["train"])) == set(ids(first["train"]))
    assert set(ids(reordered["heldout"])) == set(ids(first["heldout"]))


def test_short_names_use_shared_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "privacyrestore")
    monkeypatch.setenv("TEXTFREE_DATA", str(tmp_path))
    assert ids(ppft_split("ddx")["train"]) == ids(ppft_split(DDX_DIR)["train"])
    assert ppft_split("pri-slja")["manifest"]["dataset"] == "pri-slja"


@pytest.mark.shared_data
@requires_shared_data
@pytest.mark.parametrize(
    ("dataset", "expected"),
    [
        (
            "ddx",
            {
                "dev": 309,
                "test": 1549,
                "dev_in_test": 309,
                "unique": 1549,
                "test_only": 1240,
                "groups": 1359,
                "groups_with_dev": 298,
                "test_only_sharing_dev_context": 61,
                "train": 967,
                "train_from_dev_groups": 370,
                "train_from_hash": 597,
                "validation": 0,
                "heldout": 582,
            },
        ),
        (
            "slja",
            {
                "dev": 130,
                "test": 654,
                "dev_in_test": 130,
                "unique": 654,
                "test_only": 524,
                "groups": 651,
                "groups_with_dev": 130,
                "test_only_sharing_dev_context": 2,
                "train": 387,
                "train_from_dev_groups": 132,
                "train_from_hash": 255,
                "validation": 0,
                "heldout": 267,
            },
        ),
    ],
)
def test_real_split_counts(dataset: str, expected: dict[str, int]) -> None:
    split = ppft_split(dataset)
    assert split["manifest"]["counts"] == expected
    check_invariants(split, dataset)
    again = ppft_split(dataset)
    assert ids(again["train"]) == ids(split["train"]) and ids(again["heldout"]) == ids(split["heldout"])
