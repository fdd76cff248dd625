"""docs/bad-input.md's table is the catalogue of bad inputs that tests/integration/test_bad_input_catalogue.py runs
against the real stack: written from it, never apart from it."""
from __future__ import annotations

from tests.integration.test_bad_input_catalogue import CATALOGUE, DOC, KINDS, table, written_table


def test_the_docs_table_is_the_catalogue():
    assert written_table(DOC) == table(), (f"{DOC} differs from the catalogue: run "
                                           "`.venv/bin/python -m tests.integration.test_bad_input_catalogue --write`")


def test_every_case_has_a_row_with_its_words():
    rows = table().splitlines()
    assert all(case.row() in rows and case.kind in KINDS and case.words for case in CATALOGUE)


def test_a_changed_catalogue_is_a_changed_table(tmp_path, monkeypatch):
    doc = tmp_path / "bad-input.md"
    doc.write_text(f"prose\n\n{table()}\n\nmore prose\n")
    assert written_table(doc) == table()
    monkeypatch.setattr("tests.integration.test_bad_input_catalogue.CATALOGUE", CATALOGUE[:-1])
    assert written_table(doc) != table()
