"""Which column DEFAULTs are constants (core/table.py: literal_default): a re-copy may write a row in place only
where every column the source does not fill takes a constant."""
from __future__ import annotations

import pytest

from core.table import literal_default


@pytest.mark.parametrize("default, extra", [(None, ""), ("NULL", ""), ("'new'", ""), ("0", ""), ("-1.5", ""),
                                            ("1e3", "")])
def test_constants_are_literal(default, extra):
    assert literal_default(default, extra)


@pytest.mark.parametrize("default, extra", [("(`v` * 2)", ""), ("current_timestamp()", ""), ("uuid()", ""),
                                            ("CURRENT_TIMESTAMP", "DEFAULT_GENERATED"), ("new", "")])
def test_expressions_and_mysqls_unquoted_strings_are_not(default, extra):
    assert not literal_default(default, extra)
