"""Cells: loading, validation errors that name the file and the field, grid expansion, the registry."""

from pathlib import Path

import pytest

from textfree.experiments import (
    Cell,
    CellError,
    available_cell_kinds,
    expand_grid,
    get_cell_kind,
    load_cell,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "cells"

VALID = """\
name: tiny
kind: privatization
texts: ["the patient has a fever", "chest pain since this morning"]
mechanism: {name: l2_laplace, epsilon: 75}
params: {k: 4}
grid:
  mechanism.epsilon: [10, 28, 75]
  params.k: [4, 8]
"""


def write(tmp_path, text, name="cell.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def error_for(tmp_path, text) -> CellError:
    p = write(tmp_path, text)
    with pytest.raises(CellError) as info:
        load_cell(p)
    assert str(p) in str(info.value), "the error must name the file"
    return info.value


# ------------------------------------------------------------------------------------------------ valid
def test_valid_cell_and_defaults(tmp_path):
    cell = load_cell(write(tmp_path, VALID))
    assert cell.name == "tiny" and cell.kind == "privatization"
    assert cell.seeds == [0, 1, 2] and cell.encoder == "default" and cell.metrics == []
    assert cell.dataset is None and cell.attack is None and cell.notes == ""
    assert Cell.from_dict(cell.to_dict()) == cell


@pytest.mark.parametrize("name", ["privatization_minilm.yaml", "privatization_pri_ddx.yaml"])
def test_example_cells_load(name):
    cell = load_cell(EXAMPLES / name)
    assert cell.kind == "privatization"
    assert len(cell.points()) == 12
    assert cell.grid == {"mechanism.epsilon": [10, 28, 75, 300], "params.k": [4, 8, 16]}


def test_every_field_has_help():
    helps = Cell.field_help()
    assert set(helps) == {
        "name",
        "kind",
        "dataset",
        "split",
        "limit",
        "texts",
        "encoder",
        "mechanism",
        "params",
        "grid",
        "attack",
        "metrics",
        "seeds",
        "notes",
    }
    assert all(h.strip() for h in helps.values())


def test_yaml_exponent_is_a_float(tmp_path):
    cell = load_cell(write(tmp_path, VALID.replace("epsilon: 75}", "epsilon: 1e3}")))
    assert cell.mechanism["epsilon"] == 1000.0


# ------------------------------------------------------------------------------------------ bad fields
@pytest.mark.parametrize(
    "edit, field, fragment",
    [
        (lambda t: t + "seed: [1]\n", "seed", "did you mean 'seeds'"),
        (lambda t: t + "colour: red\n", "colour", "unknown field"),
        (lambda t: t + "seeds: 3\n", "seeds", "list of integers"),
        (lambda t: t + "seeds: [0, 0]\n", "seeds", "distinct"),
        (lambda t: t + "seeds: [true]\n", "seeds", "integers"),
        (lambda t: t + "limit: -1\n", "limit", "integer >= 1"),
        (lambda t: t + "limit: 2.5\n", "limit", "integer >= 1"),
        (lambda t: t + "notes: [1]\n", "notes", "string"),
        (lambda t: t + "metrics: [cosine, cosine]\n", "metrics", "distinct"),
        (lambda t: t + "metrics: [bleu]\n", "metrics", "does not compute"),
        (lambda t: t + "split: test\n", "split", "needs a `dataset`"),
        (lambda t: t + "dataset: pri-ddx\n", "texts", "not both"),
        (lambda t: t.replace("name: tiny", "name: 'a b/c'"), "name", "letters, digits"),
        (lambda t: t.replace("name: tiny\n", ""), "name", "required"),
        (lambda t: t.replace("kind: privatization", "kind: nope"), "kind", "unknown cell kind"),
        (lambda t: t.replace('"the patient has a fever"', '""'), "texts", "entry 0"),
        (lambda t: t.replace("params: {k: 4}", "params: 4"), "params", "mapping"),
        (lambda t: t.replace("params: {k: 4}", "params: {q: 4}"), "params", "takes no parameter"),
        (
            lambda t: t.replace("params: {k: 4}", "params: {k: 0}").replace("  params.k: [4, 8]\n", ""),
            "params.k",
            "k must be an integer >= 1, got 0",
        ),
        (
            lambda t: t.replace("params.k: [4, 8]", "params.k: [4, 2.5]"),
            "grid.params.k",
            "k must be an integer >= 1, got 2.5",
        ),
        (lambda t: t.replace("params: {k: 4}", "params: {k: 4, normalize: 1}"), "params.normalize", "true or false"),
        (
            lambda t: t.replace("params: {k: 4}", "params: {k: 4, sensitivity: -2}"),
            "params.sensitivity",
            "finite number > 0",
        ),
        (lambda t: t.replace("params.k: [4, 8]", "params.k: []"), "grid.params.k", "non-empty list"),
        (lambda t: t.replace("params.k: [4, 8]", "params.k: 4"), "grid.params.k", "non-empty list"),
        (lambda t: t.replace("params.k: [4, 8]", "params.k: [4, 4]"), "grid.params.k", "distinct"),
        # compared by value: 75 and 75.0 are one grid point, which would run twice
        (
            lambda t: t.replace("[10, 28, 75]", "[10, 75, 75.0]"),
            "grid.mechanism.epsilon",
            "75 and 75.0 are the same value",
        ),
        # privatization runs no attack: an attack section would be silently ignored
        (lambda t: t + "attack: {threat: {embedding_table: true}}\n", "attack", "runs no attack"),
        (lambda t: t.replace("params.k: [4, 8]", "params.q: [4, 8]"), "grid", "takes no parameter"),
        (lambda t: t.replace("params.k: [4, 8]", "foo.k: [4, 8]"), "grid", "<mechanism|params|attack>"),
        (lambda t: t.replace("params.k: [4, 8]", "attack.steps: [1, 2]"), "grid", "needs a `attack` mapping"),
        (
            lambda t: t.replace("[10, 28, 75]", "[10, -1]"),
            "mechanism",
            "grid point {mechanism.epsilon: -1, params.k: 4}",
        ),
        (
            lambda t: t.replace("mechanism: {name: l2_laplace, epsilon: 75}", "mechanism: {epsilon: 75}"),
            "mechanism.name",
            "needs a 'name'",
        ),
        (
            lambda t: t.replace("mechanism: {name: l2_laplace, epsilon: 75}", "mechanism: {name: nope}"),
            "mechanism",
            "unknown mechanism",
        ),
        (
            lambda t: t.replace(
                "mechanism: {name: l2_laplace, epsilon: 75}", "mechanism: {name: l2_laplace, sigma: 1}"
            ),
            "mechanism",
            "no parameter",
        ),
        (
            lambda t: t.replace("mechanism: {name: l2_laplace, epsilon: 75}\n", "").replace(
                "  mechanism.epsilon: [10, 28, 75]\n", ""
            ),
            "mechanism",
            "needs a `mechanism`",
        ),
        (
            lambda t: t.replace('texts: ["the patient has a fever", "chest pain since this morning"]\n', ""),
            "texts",
            "needs a `dataset` or inline `texts`",
        ),
        (lambda t: t + "name: other\n", "name", "duplicate key"),
    ],
)
def test_bad_field_is_named(tmp_path, edit, field, fragment):
    err = error_for(tmp_path, edit(VALID))
    assert err.field == field, str(err)
    assert f"field '{field}'" in str(err)
    assert fragment in str(err)


def test_file_level_errors(tmp_path):
    with pytest.raises(CellError, match="no such file"):
        load_cell(tmp_path / "missing.yaml")
    assert "not valid YAML" in str(error_for(tmp_path, "name: [unclosed\n"))
    assert "empty" in str(error_for(tmp_path, ""))
    assert "mapping of fields" in str(error_for(tmp_path, "- a\n- b\n"))


def test_a_cell_that_is_not_utf8_is_one_error_naming_the_file(tmp_path):
    p = tmp_path / "latin1.yaml"
    p.write_bytes(VALID.encode() + "notes: caf\xe9\n".encode("latin-1"))
    with pytest.raises(CellError, match="not valid UTF-8") as info:
        load_cell(p)
    assert str(p) in str(info.value)


def test_grid_values_are_compared_by_value_and_bools_stay_apart_from_ints():
    base = {"name": "x", "kind": "k", "texts": ["a"], "params": {}}
    with pytest.raises(CellError, match="distinct"):
        Cell.from_dict(base | {"grid": {"params.x": [1, 1.0]}}, strict=False)
    with pytest.raises(CellError, match="distinct"):
        Cell.from_dict(base | {"grid": {"params.x": [0.5, "a", 0.5]}}, strict=False)
    cell = Cell.from_dict(base | {"grid": {"params.x": [True, 1, False, 0, "1", None]}}, strict=False)
    assert len(cell.points()) == 6


def test_format_only_validation_skips_the_registry():
    data = {"name": "x", "kind": "not_registered_here", "texts": ["a"]}
    assert Cell.from_dict(data, strict=False).kind == "not_registered_here"
    with pytest.raises(CellError, match="unknown cell kind"):
        Cell.from_dict(data)


# ------------------------------------------------------------------------------------------------- grid
def test_expand_grid_cartesian_product_in_key_order():
    pts = expand_grid({"mechanism.epsilon": [10, 28, 75], "params.k": [4, 8]})
    assert len(pts) == 6
    assert pts[0] == {"mechanism.epsilon": 10, "params.k": 4}
    assert pts[1] == {"mechanism.epsilon": 10, "params.k": 8}
    assert pts[-1] == {"mechanism.epsilon": 75, "params.k": 8}
    assert expand_grid({}) == [{}]


def test_resolve_applies_a_point_without_touching_the_cell(tmp_path):
    cell = load_cell(write(tmp_path, VALID))
    r = cell.resolve({"mechanism.epsilon": 10, "params.k": 8})
    assert r.mechanism == {"name": "l2_laplace", "epsilon": 10}
    assert r.params == {"k": 8} and r.attack is None
    assert cell.mechanism["epsilon"] == 75 and cell.params["k"] == 4


def test_nested_grid_key_reaches_an_inner_mechanism():
    cell = Cell.from_dict(
        {
            "name": "clip",
            "kind": "privatization",
            "texts": ["a b c"],
            "mechanism": {"name": "clipped", "inner": {"name": "l2_laplace", "epsilon": 1}, "max_norm": 2.0},
            "grid": {"mechanism.inner.epsilon": [5, 50]},
        }
    )
    assert [cell.resolve(p).mechanism["inner"]["epsilon"] for p in cell.points()] == [5, 50]
    with pytest.raises(CellError, match="no mapping at 'epsilon'"):
        Cell.from_dict({**cell.to_dict(), "grid": {"mechanism.inner.epsilon.x": [1]}})


# --------------------------------------------------------------------------------------------- registry
def test_registry_knows_privatization():
    assert "privatization" in available_cell_kinds()
    kind = get_cell_kind("privatization")
    assert kind.name == "privatization" and "cosine" in kind.metrics and "k" in kind.params
    with pytest.raises(ValueError, match="unknown cell kind 'nope'; known: .*privatization"):
        get_cell_kind("nope")
