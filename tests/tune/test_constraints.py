"""Constraints over config names: evaluated on a trial's values, the failing one explained with them, and
anything beyond arithmetic, comparisons and logic refused where the file is read."""

from __future__ import annotations

import pytest

from lightning_tf.tune.constraints import Constraint


def test_a_constraint_reads_dotted_names_and_holds_or_not() -> None:
    divisible = Constraint("model.init_args.d_model % model.init_args.n_heads == 0")
    assert divisible.names == ("model.init_args.d_model", "model.init_args.n_heads")
    assert divisible.holds({"model.init_args.d_model": 64, "model.init_args.n_heads": 4})
    assert not divisible.holds({"model.init_args.d_model": 48, "model.init_args.n_heads": 5})
    assert divisible.explain({"model.init_args.d_model": 48, "model.init_args.n_heads": 5}) == (
        "model.init_args.d_model % model.init_args.n_heads == 0 (d_model 48, n_heads 5)"
    )


@pytest.mark.parametrize(
    ("text", "values", "holds"),
    [
        ("a.x <= a.y < 10", {"a.x": 3, "a.y": 9}, True),
        ("a.x <= a.y < 10", {"a.x": 3, "a.y": 10}, False),  # chained: both comparisons
        ("a.b in ['patches', 'bars'] or a.n == 1", {"a.b": "variates", "a.n": 1}, True),
        ("not (a.b == 'bars' and a.n > 2)", {"a.b": "bars", "a.n": 3}, False),
        ("(a.n * 2 if a.b == 'bars' else a.n) <= 4", {"a.b": "bars", "a.n": 3}, False),
        ("a.lr ** 0.5 - 1 / a.n // 1 >= -a.lr", {"a.lr": 0.01, "a.n": 2}, True),
        ("a.s not in (None, 'x')", {"a.s": None}, False),
    ],
)
def test_arithmetic_comparisons_and_logic(text: str, values: dict, holds: bool) -> None:
    assert Constraint(text).holds(values) is holds


@pytest.mark.parametrize(
    "text",
    ["len(a.b) > 1", "a.b().c == 1", "[x for x in a.b]", "a.b[0] == 1", "lambda: 1", "a.x if a.y", "{'k': 1} == a.x"],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"constraint .* (is not allowed|is not an expression)"):
        Constraint(text)
