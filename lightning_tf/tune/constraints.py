"""Constraints of a search file: arithmetic and comparisons over config names, checked on each trial's
parameters before it starts (``model.init_args.d_model % model.init_args.n_heads == 0``).

A constraint is a Python expression whose names are the config's own dotted names; it is parsed once with
:mod:`ast` and evaluated by a small interpreter that knows numbers, strings, arithmetic, comparisons,
``and`` / ``or`` / ``not``, ``in`` and conditional expressions, and nothing else (no calls, no attributes
beyond a dotted name), so a search file cannot run code.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Constraint"]

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def _dotted(node: ast.expr) -> str | None:
    """``model.init_args.lr`` from its Name / Attribute chain; None for any other expression."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


@dataclass(frozen=True)
class Constraint:
    """One constraint: its text and the config names it reads.

    Args:
        text: the expression as written in the search file.
    """

    text: str
    names: tuple[str, ...] = field(init=False, compare=False)
    _tree: ast.expr = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            tree = ast.parse(self.text, mode="eval")
        except SyntaxError as err:
            raise ValueError(f"constraint {self.text!r} is not an expression: {err.msg}") from None
        object.__setattr__(self, "_tree", tree.body)
        object.__setattr__(self, "names", tuple(sorted(self._collect(tree.body))))

    def _collect(self, node: ast.expr) -> set[str]:
        name = _dotted(node)
        if name is not None:
            return {name}
        if isinstance(node, ast.Constant):
            if node.value is None or isinstance(node.value, (bool, int, float, str)):
                return set()
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return self._collect(node.left) | self._collect(node.right)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return self._collect(node.operand)
        elif isinstance(node, ast.BoolOp):
            return set().union(*(self._collect(v) for v in node.values))
        elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            return set().union(*(self._collect(v) for v in [node.left, *node.comparators]))
        elif isinstance(node, ast.IfExp):
            return self._collect(node.test) | self._collect(node.body) | self._collect(node.orelse)
        elif isinstance(node, (ast.List, ast.Tuple)):
            return set().union(set(), *(self._collect(v) for v in node.elts))
        raise ValueError(
            f"constraint {self.text!r}: {ast.unparse(node)!r} is not allowed (numbers, strings, config names, "
            "arithmetic, comparisons, and/or/not, in, x if c else y)"
        )

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Whether the constraint is true for ``values`` (config name -> value; every name it reads)."""
        return bool(self._eval(self._tree, values))

    def _eval(self, node: ast.expr, values: Mapping[str, Any]) -> Any:
        name = _dotted(node)
        if name is not None:
            return values[name]
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](self._eval(node.left, values), self._eval(node.right, values))
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](self._eval(node.operand, values))
        if isinstance(node, ast.BoolOp):
            results = (self._eval(v, values) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, values)
            for op, right_node in zip(node.ops, node.comparators):
                right = self._eval(right_node, values)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            branch = node.body if self._eval(node.test, values) else node.orelse
            return self._eval(branch, values)
        assert isinstance(node, (ast.List, ast.Tuple))  # _collect admitted nothing else
        return [self._eval(v, values) for v in node.elts]

    def explain(self, values: Mapping[str, Any]) -> str:
        """``<text> (d_model 48, n_heads 5)``: the constraint with the values it was given."""
        shown = ", ".join(f"{name.rpartition('.')[2]} {values.get(name)!r}" for name in self.names)
        return f"{self.text} ({shown})"
