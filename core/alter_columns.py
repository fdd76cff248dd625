"""Which source column fills which new column, read from the ALTER text (docs/invariants.md, 9).

The new table is made with CREATE … LIKE plus the user's ALTER, so a column the ALTER renames has a
new name there; matching columns by name alone would leave it empty. The server does not report
renames, so they are read from the ALTER itself: `RENAME COLUMN a TO b` and
`CHANGE [COLUMN] a b <definition>`. Dropped columns are read too, so that a column dropped and added
again under the same name starts empty, as the ALTER means. Every clause of one ALTER names the
columns of the table before it (`RENAME COLUMN a TO b, RENAME COLUMN b TO a` swaps them), so the
result maps original names to new names with no chaining.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# A token is (kind, text): kind is "name" (backtick-quoted identifier, unquoted), "word" (bare
# identifier or keyword, as written), "dq" (double-quoted: an identifier under ANSI_QUOTES),
# "str" (single-quoted string) or "sym" (one punctuation character).
Token = tuple[str, str]

_WORD = re.compile(r"[0-9A-Za-z_$\u0080-\uffff]+")
_NOT_COLUMNS = {"INDEX", "KEY", "PRIMARY", "FOREIGN", "CONSTRAINT", "CHECK", "PARTITION", "SYSTEM", "PERIOD",
                "FULLTEXT", "SPATIAL", "UNIQUE", "DEFAULT"}


@dataclass(frozen=True)
class ColumnChanges:
    """Column renames ({original: new}, same-name CHANGE clauses left out) and dropped columns of an ALTER."""

    renamed: dict[str, str]
    dropped: frozenset[str]


def _quoted(text: str, start: int, quote: str) -> tuple[str, int]:
    """The body of a quoted token starting at `start` (the opening quote), and the index after it."""
    out: list[str] = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "`" and i + 1 < len(text):
            out.append(text[i:i + 2])
            i += 2
            continue
        if ch == quote:
            if text[i + 1:i + 2] == quote:   # doubled quote stands for itself
                out.append(quote)
                i += 2
                continue
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise ValueError(f"unterminated {quote} in ALTER text")


def tokenize(alter: str) -> list[Token]:
    """Split ALTER text into tokens, dropping whitespace and comments (`/*! … */` keeps its body)."""
    tokens: list[Token] = []
    i = 0
    while i < len(alter):
        ch = alter[i]
        if ch.isspace():
            i += 1
        elif alter.startswith("/*!", i):
            i += 3
            while i < len(alter) and alter[i].isdigit():
                i += 1
        elif alter.startswith("*/", i):
            i += 2   # the end of an executable comment
        elif alter.startswith("/*", i):
            end = alter.find("*/", i + 2)
            i = len(alter) if end < 0 else end + 2
        elif ch == "#" or alter.startswith("-- ", i) or alter.startswith("--\t", i) or alter[i:] == "--":
            end = alter.find("\n", i)
            i = len(alter) if end < 0 else end + 1
        elif ch in "`\"'":
            body, i = _quoted(alter, i, ch)
            tokens.append(({"`": "name", '"': "dq", "'": "str"}[ch], body))
        elif match := _WORD.match(alter, i):
            tokens.append(("word", match.group()))
            i = match.end()
        else:
            tokens.append(("sym", ch))
            i += 1
    return tokens


def clauses(alter: str) -> list[list[Token]]:
    """The ALTER's comma-separated clauses (commas inside parentheses belong to their clause)."""
    result: list[list[Token]] = [[]]
    depth = 0
    for token in tokenize(alter):
        if token == ("sym", "("):
            depth += 1
        elif token == ("sym", ")"):
            depth = max(depth - 1, 0)
        elif token == ("sym", ",") and depth == 0:
            result.append([])
            continue
        result[-1].append(token)
    return [c for c in result if c]


class _Clause:
    """A cursor over one clause's tokens."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.at = 0

    def keyword(self, *words: str) -> bool:
        """Consume the keywords `words` (bare, any case) if they come next."""
        ahead = self.tokens[self.at:self.at + len(words)]
        if len(ahead) == len(words) and all(k == "word" and t.upper() == w for (k, t), w in zip(ahead, words)):
            self.at += len(words)
            return True
        return False

    def name(self) -> str | None:
        """Consume an identifier if one comes next."""
        if self.at < len(self.tokens) and self.tokens[self.at][0] in ("name", "word", "dq"):
            self.at += 1
            return self.tokens[self.at - 1][1]
        return None

    def peek_word(self) -> str | None:
        kind, text = self.tokens[self.at] if self.at < len(self.tokens) else ("", "")
        return text.upper() if kind == "word" else None


def column_changes(alter: str) -> ColumnChanges:
    """Renamed and dropped columns of an ALTER (the clause list after ALTER TABLE t)."""
    renamed: dict[str, str] = {}
    dropped: set[str] = set()
    for tokens in clauses(alter):
        c = _Clause(tokens)
        if c.keyword("RENAME", "COLUMN"):
            c.keyword("IF", "EXISTS")
            old = c.name()
            if old is not None and c.keyword("TO"):
                new = c.name()
                if new is not None and new != old:
                    renamed[old] = new
        elif c.keyword("CHANGE"):
            c.keyword("COLUMN")
            c.keyword("IF", "EXISTS")
            old, new = c.name(), c.name()
            if old is not None and new is not None and new != old:
                renamed[old] = new
        elif c.keyword("DROP"):
            if not c.keyword("COLUMN") and c.peek_word() in _NOT_COLUMNS:
                continue
            c.keyword("IF", "EXISTS")
            name = c.name()
            if name is not None:
                dropped.add(name)
    return ColumnChanges(renamed, frozenset(dropped))


# what `RENAME …` of an ALTER may rename other than the table itself
_NOT_THE_TABLE = {"COLUMN", "INDEX", "KEY", "CONSTRAINT"}


def renames_table(alter: str) -> bool:
    """Whether the ALTER renames the table itself (`RENAME [TO|AS] name`), not one of its columns, indexes or keys;
    False for text that cannot be read (an unterminated quote: the server's own error comes when it is run)."""
    try:
        parts = clauses(alter)
    except ValueError:
        return False
    for tokens in parts:
        clause = _Clause(tokens)
        if clause.keyword("RENAME") and clause.peek_word() not in _NOT_THE_TABLE:
            return True
    return False


def renamed_columns(alter: str) -> dict[str, str]:
    """{original name: new name} of every column the ALTER renames."""
    return column_changes(alter).renamed
