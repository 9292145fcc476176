"""Rules built at run time (tracekit.analysis.classify): their categories normalised to Category, and the
errors that name what is wrong. (The shipped rules are built at import, before any test runs.)"""

from __future__ import annotations

import pytest

from tracekit.analysis.classify import ChildRule, Classifier, Rule
from tracekit.vocab import Category


def test_child_rule_category_becomes_a_category():
    r = ChildRule("sdpa-child", "softmax", r"^aten::x$", r"^aten::y$")
    assert type(r.category) is Category and r.category is Category.SOFTMAX
    c = Classifier(child_rules=(r,))
    assert c.host_child_rule("aten::x", "aten::y") is r
    assert c.host_child_rule("aten::x", "aten::z") is None


def test_child_rule_with_an_unknown_category_is_refused():
    with pytest.raises(ValueError, match=r"^rule 'bad-child': unknown category 'attention'$"):
        ChildRule("bad-child", "attention", r"^a$", r"^b$")


def test_rule_with_unknown_kinds_is_refused():
    with pytest.raises(ValueError, match=r"^rule 'bad-kinds': unknown kinds \['cpu_op', 'python'\]$"):
        Rule("bad-kinds", Category.OTHER, kinds=frozenset({"kernel", "python", "cpu_op"}))
