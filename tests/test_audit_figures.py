"""Figures read at page width: the attacks report's token-inversion panels are a grid (at most three a row, not nine
in one 4158-pixel row), and the cross matrix's 34 lines get one legend below the panels, inside the picture."""

from pathlib import Path

from textfree.attacks.report import Curve, Point, _figure
from textfree.attacks.report_matrix import COLUMNS, MatrixRow, matrix_figure


def _size(path: Path) -> tuple[int, int]:
    from matplotlib.image import imread

    height, width = imread(path).shape[:2]
    return width, height


def _curve(i: int) -> Curve:
    points = [
        Point(eps, {"epsilon_unit": [eps], "recovery_nn_l2": [min(1.0, eps / 100)], "recovery_nn_cosine": [0.1]})
        for eps in (25, 50, 100)
    ]
    return Curve(f"cell_{i}", {"name": "l2_laplace"}, "mechanism.epsilon", points, "x.json", "d", None, [0])


def test_token_inversion_panels_are_a_grid_at_page_width(tmp_path):
    path = tmp_path / "token_inversion.png"
    assert _figure([_curve(i) for i in range(9)], path)
    width, height = _size(path)
    assert width <= 1300 and height > 800  # three rows of three, not one row of nine
    assert _figure([_curve(0)], tmp_path / "one.png")
    assert _size(tmp_path / "one.png")[0] < 600


def test_cross_matrix_legend_fits_below_the_panels(tmp_path):
    rows = []
    for family, names in (("token", ["token noise, L2-Laplace", "token noise, Gaussian"]), ("pooled", ["pooled PPFT"])):
        for name in names:
            row = MatrixRow(name, family)
            for column, _ in COLUMNS:
                for x in (30.0, 100.0):
                    row.add(column, x, x / 2, "cell")
            rows.append(row)
    path = tmp_path / "cross_matrix.png"
    assert matrix_figure(rows, path)
    width, height = _size(path)
    assert width <= 1300 and height >= 450
    assert not matrix_figure([], Path(tmp_path / "none.png"))
