"""The compiler of the AMPS filter language: a parsed tree becomes nested closures.

``Compiler().pred(node)`` gives a two-valued predicate (a message matches only when the
filter is TRUE), ``Compiler().value(node)`` an evaluator of AMPS values. Constant
sub-trees are folded once, and the common shapes (``/field <op> literal``, AND/OR of two)
get closures specialised for them: that is where a filter spends its time per message.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any, Final

from .filter_functions import compile_call
from .filter_syntax import (
    BOOLEAN_NODES,
    Affix,
    Arith,
    Between,
    Call,
    Compare,
    In,
    IsNull,
    Like,
    Lit,
    Logic,
    Node,
    Not,
    Path,
    Unary,
)
from .filter_values import (
    Bool3,
    Eval,
    Op,
    Predicate,
    Step,
    as_num,
    cmp_right,
    cmp_scalar,
    compare_any,
    constant,
    each_scalar,
    first_scalar,
    is_null_value,
    negate3,
    parse_num,
    scalar_str,
    truth3,
    walk_steps,
)

__all__ = ["Compiler"]

_OPS: Final[dict[str, Op]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_MIRROR: Final = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _div(a: int | float, b: int | float) -> float | None:
    return None if b == 0 else a / b


def _mod(a: int | float, b: int | float) -> int | float | None:
    """Remainder with the sign of the left operand (``-5 % 3 = -2``, ``5 % -3 = 2``)."""
    if b == 0:
        return None
    if type(a) is int and type(b) is int:
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return math.fmod(a, b)


_ARITH: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": _div,
    "%": _mod,
}


def _const_pred(value: bool) -> Predicate:
    def f(_d: Any) -> bool:
        return value

    return f


def _path_getter(steps: tuple[Step, ...]) -> Eval:
    if len(steps) == 1 and type(steps[0]) is str:
        key = steps[0]
        walk = walk_steps

        def get1(d: Any) -> Any:
            if type(d) is dict:
                return d.get(key)
            return walk(d, steps)

        return get1
    if all(type(s) is str for s in steps):
        count = len(steps)

        def getn(d: Any) -> Any:
            v = d
            for i in range(count):
                if type(v) is dict:
                    v = v.get(steps[i])
                else:
                    return walk_steps(v, steps[i:]) if v is not None else None
            return v

        return getn

    def get(d: Any) -> Any:
        return walk_steps(d, steps)

    return get


class Compiler:
    """Turns an AST into closures; ``value`` gives AMPS values, ``pred`` gives matches."""

    # -- entry points ----------------------------------------------------
    def value(self, node: Node) -> Eval:
        if node.const and not isinstance(node, Lit):
            return constant(self._value(node)(None))
        return self._value(node)

    def bool3(self, node: Node) -> Bool3:
        """Three-valued truth of a node."""
        f = self.value(node)
        if isinstance(node, BOOLEAN_NODES) or (
            isinstance(node, Lit) and (node.value is None or isinstance(node.value, bool))
        ):
            return f

        def truth(d: Any) -> bool | None:
            return truth3(f(d))

        return truth

    def pred(self, node: Node) -> Predicate:
        """Two-valued 'matches' (TRUE only); NULL and FALSE both mean no match."""
        if node.const:
            return _const_pred(truth3(self.value(node)(None)) is True)
        if isinstance(node, Logic):
            return self._logic_pred(node)
        if isinstance(node, Not):
            f = self.bool3(node.operand)

            def not_pred(d: Any) -> bool:
                return f(d) is False

            return not_pred
        if isinstance(node, Compare):
            return self._compare_node(node, pred=True)
        g = self.bool3(node)

        def is_true(d: Any) -> bool:
            return g(d) is True

        return is_true

    # -- node kinds ----------------------------------------------------------
    def _value(self, node: Node) -> Eval:
        if isinstance(node, Lit):
            return constant(node.value)
        if isinstance(node, Path):
            return _path_getter(node.steps)
        if isinstance(node, Compare):
            return self._compare_node(node, pred=False)
        if isinstance(node, Logic):
            return self._logic3(node)
        if isinstance(node, Not):
            f = self.bool3(node.operand)

            def not3(d: Any) -> bool | None:
                r = f(d)
                return None if r is None else not r

            return not3
        if isinstance(node, Arith):
            return self._arith(node)
        if isinstance(node, Unary):
            return self._unary(node)
        if isinstance(node, In):
            return self._in(node)
        if isinstance(node, Between):
            return self._between(node)
        if isinstance(node, Like):
            return self._like(node)
        if isinstance(node, IsNull):
            return self._is_null_node(node)
        if isinstance(node, Affix):
            return self._affix(node)
        if isinstance(node, Call):
            return self._call(node)
        raise AssertionError(f"unknown node {node!r}")  # pragma: no cover

    def _compare_node(self, node: Compare, *, pred: bool) -> Eval:
        op_name, left, right = node.op, node.left, node.right
        if isinstance(left, Lit) and not isinstance(right, Lit):
            op_name, left, right = _MIRROR[op_name], right, left
        op = _OPS[op_name]
        compare = compare_any
        if isinstance(right, Lit):
            c = right.value
            if c is None:  # comparison with NULL is never true
                return constant(False if pred else None)
            get = self.value(left)
            if type(c) is int or type(c) is float:
                if pred:
                    return self._fast_num_pred(left, get, c, op)

                def num3(d: Any) -> bool | None:
                    v = get(d)
                    t = type(v)
                    if t is int or t is float:
                        return op(v, c)
                    return compare(v, c, op)

                return num3
            if type(c) is str:
                if pred:
                    return self._fast_str_pred(left, get, c, op)

                def str3(d: Any) -> bool | None:
                    v = get(d)
                    if type(v) is str and v:
                        return op(v, c)
                    return compare(v, c, op)

                return str3
            if pred:

                def lit_pred(d: Any) -> bool:
                    return compare(get(d), c, op) is True

                return lit_pred

            def lit3(d: Any) -> bool | None:
                return compare(get(d), c, op)

            return lit3
        lf = self.value(left)
        rf = self.value(right)
        if pred:

            def gen_pred(d: Any) -> bool:
                return compare(lf(d), rf(d), op) is True

            return gen_pred

        def gen3(d: Any) -> bool | None:
            return compare(lf(d), rf(d), op)

        return gen3

    @staticmethod
    def _fast_num_pred(left: Node, get: Eval, c: int | float, op: Op) -> Predicate:
        compare = compare_any
        if isinstance(left, Path) and len(left.steps) == 1 and type(left.steps[0]) is str:
            key = left.steps[0]

            def key_num(d: Any) -> bool:
                v = d.get(key) if type(d) is dict else get(d)
                t = type(v)
                if t is int or t is float:
                    return op(v, c)
                return compare(v, c, op) is True

            return key_num

        def get_num(d: Any) -> bool:
            v = get(d)
            t = type(v)
            if t is int or t is float:
                return op(v, c)
            return compare(v, c, op) is True

        return get_num

    @staticmethod
    def _fast_str_pred(left: Node, get: Eval, c: str, op: Op) -> Predicate:
        compare = compare_any
        if isinstance(left, Path) and len(left.steps) == 1 and type(left.steps[0]) is str:
            key = left.steps[0]
            if op is operator.eq:

                def key_eq(d: Any) -> bool:
                    v = d.get(key) if type(d) is dict else get(d)
                    if type(v) is str:
                        return v == c
                    return compare(v, c, op) is True

                return key_eq

            def key_str(d: Any) -> bool:
                v = d.get(key) if type(d) is dict else get(d)
                if type(v) is str and v:
                    return op(v, c)
                return compare(v, c, op) is True

            return key_str

        def get_str(d: Any) -> bool:
            v = get(d)
            if type(v) is str and v:
                return op(v, c)
            return compare(v, c, op) is True

        return get_str

    def _logic_pred(self, node: Logic) -> Predicate:
        preds = [self.pred(item) for item in node.items]
        if node.op == "AND":
            if len(preds) == 2:
                a, b = preds

                def and2(d: Any) -> bool:
                    return a(d) and b(d)

                return and2

            def and_n(d: Any) -> bool:
                for p in preds:  # noqa: SIM110 - a loop beats all(<genexpr>) here
                    if not p(d):
                        return False
                return True

            return and_n
        if len(preds) == 2:
            a, b = preds

            def or2(d: Any) -> bool:
                return a(d) or b(d)

            return or2

        def or_n(d: Any) -> bool:
            for p in preds:  # noqa: SIM110 - a loop beats any(<genexpr>) here
                if p(d):
                    return True
            return False

        return or_n

    def _logic3(self, node: Logic) -> Eval:
        fs = [self.bool3(item) for item in node.items]
        if node.op == "AND":

            def and3(d: Any) -> bool | None:
                res: bool | None = True
                for f in fs:
                    r = f(d)
                    if r is False:
                        return False
                    if r is None:
                        res = None
                return res

            return and3

        def or3(d: Any) -> bool | None:
            res: bool | None = False
            for f in fs:
                r = f(d)
                if r is True:
                    return True
                if r is None:
                    res = None
            return res

        return or3

    def _arith(self, node: Arith) -> Eval:
        fn = _ARITH[node.op]
        lf = self.value(node.left)
        rf = self.value(node.right)

        def arith(d: Any) -> Any:
            a = as_num(lf(d))
            if a is None:
                return None
            b = as_num(rf(d))
            if b is None:
                return None
            try:
                return fn(a, b)
            except (ArithmeticError, ValueError):
                return None

        return arith

    def _unary(self, node: Unary) -> Eval:
        f = self.value(node.operand)
        negate = node.op == "-"

        def unary(d: Any) -> Any:
            n = as_num(f(d))
            if n is None:
                return None
            return -n if negate else n

        return unary

    def _in(self, node: In) -> Eval:
        get = self.value(node.operand)
        negated = node.negated
        if all(item.const for item in node.items):
            consts = [first_scalar(self.value(item)(None)) for item in node.items]
            has_null = any(v is None for v in consts)
            strs = frozenset(v for v in consts if isinstance(v, str))
            nums = frozenset(v for v in consts if v is not None and not isinstance(v, str))
            str_nums = frozenset(n for n in map(parse_num, strs) if n is not None)
            miss: bool | None = None if has_null else False

            def member(x: Any) -> bool | None:
                if x is None:
                    return None
                if type(x) is str:
                    if x in strs:
                        return True
                    if nums:
                        n = parse_num(x)
                        if n is not None and n == n and n in nums:
                            return True
                elif x == x and (x in nums or x in str_nums):
                    return True
                return miss

            test = member
        else:
            item_fns = [self.value(item) for item in node.items]

            def in_generic(d: Any) -> bool | None:
                values = [g(d) for g in item_fns]

                def member_of(x: Any) -> bool | None:
                    res: bool | None = False
                    for y in values:
                        r = cmp_right(x, y, operator.eq)
                        if r is True:
                            return True
                        if r is None:
                            res = None
                    return res

                r = each_scalar(get(d), member_of)
                return negate3(r) if negated else r

            return in_generic

        if negated:

            def not_in(d: Any) -> bool | None:
                r = each_scalar(get(d), test)
                return None if r is None else not r

            return not_in

        def in_(d: Any) -> bool | None:
            return each_scalar(get(d), test)

        return in_

    def _between(self, node: Between) -> Eval:
        get = self.value(node.operand)
        lo_f = self.value(node.low)
        hi_f = self.value(node.high)
        negated = node.negated
        ge, le = operator.ge, operator.le

        def between(d: Any) -> bool | None:
            lo = first_scalar(lo_f(d))
            hi = first_scalar(hi_f(d))

            def test(x: Any) -> bool | None:
                a = cmp_scalar(x, lo, ge)
                if a is False:
                    return False
                b = cmp_scalar(x, hi, le)
                if b is False:
                    return False
                return True if a is True and b is True else None

            r = each_scalar(get(d), test)
            return negate3(r) if negated else r

        return between

    def _like(self, node: Like) -> Eval:
        if node.regex is None:  # LIKE '' : the pattern is NULL
            return constant(None)
        get = self.value(node.operand)
        search = node.regex.test
        negated = node.negated

        def test(x: Any) -> bool | None:
            s = scalar_str(x)
            return None if s is None else search(s)

        def like(d: Any) -> bool | None:
            v = get(d)
            if type(v) is str and v:
                r: bool | None = search(v)
            else:
                r = each_scalar(v, test)
            return negate3(r) if negated else r

        return like

    def _is_null_node(self, node: IsNull) -> Eval:
        get = self.value(node.operand)
        if node.negated:

            def is_not_null(d: Any) -> bool:
                return not is_null_value(get(d))

            return is_not_null

        def is_null(d: Any) -> bool:
            return is_null_value(get(d))

        return is_null

    def _affix(self, node: Affix) -> Eval:
        get = self.value(node.operand)
        affixes = node.affixes
        negated = node.negated
        if not affixes:
            return constant(None)

        def test(x: Any) -> bool | None:
            s = scalar_str(x)
            if s is None:
                return None
            return s.startswith(affixes) if node.begins else s.endswith(affixes)

        def affix(d: Any) -> bool | None:
            r = each_scalar(get(d), test)
            return negate3(r) if negated else r

        return affix

    def _call(self, node: Call) -> Eval:
        name = node.name
        if name == "IF":
            cond = self.pred(node.args[0])
            then_f = self.value(node.args[1])
            else_f = self.value(node.args[2])

            def if_(d: Any) -> Any:
                return then_f(d) if cond(d) else else_f(d)

            return if_
        return compile_call(name, [self.value(a) for a in node.args])
