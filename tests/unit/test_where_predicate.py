"""--where: the parts of a predicate that change its answer without a write to the row are named from the text."""
import pytest

from migration.predicate import changing_parts


@pytest.mark.parametrize("predicate, named", [
    ("created > NOW() - INTERVAL 1 DAY", ["NOW() (the clock)"]),
    ("created > now(6)", ["now() (the clock)"]),
    ("created > CURRENT_TIMESTAMP", ["CURRENT_TIMESTAMP (the clock)"]),
    ("created > current_timestamp()", ["current_timestamp() (the clock)"]),
    ("created > LOCALTIME AND d < CURDATE()", ["LOCALTIME (the clock)", "CURDATE() (the clock)"]),
    ("created < SYSDATE() OR created < UTC_TIMESTAMP", ["SYSDATE() (the clock)", "UTC_TIMESTAMP (the clock)"]),
    ("epoch < UNIX_TIMESTAMP()", ["UNIX_TIMESTAMP() (the clock)"]),
    ("RAND() < 0.1", ["RAND() (random or a sequence)"]),
    ("token = UUID()", ["UUID() (random or a sequence)"]),
    ("id > NEXT VALUE FOR s", ["NEXT VALUE FOR (a sequence)"]),
    ("region = @region", ["@region (a user variable)"]),
    ("region = @'my var'", ["@'my var' (a user variable)"]),
    ("v > @@session.sql_select_limit", ["@@session.sql_select_limit (a system variable)"]),
    ("owner = CURRENT_USER", ["CURRENT_USER (the session, not the row)"]),
    ("id = LAST_INSERT_ID ()", ["LAST_INSERT_ID() (the session, not the row)"]),
    ("id > 0 /*!50000 AND created > NOW() */", ["NOW() (the clock)"]),
    ("NOW() > created AND NOW() < expires", ["NOW() (the clock)"]),   # each part named once
])
def test_a_part_that_changes_without_a_write_is_named(predicate, named):
    assert changing_parts(predicate) == named


@pytest.mark.parametrize("predicate", [
    "region = 'eu'",
    "note = 'NOW() @x RAND()'",              # text in a string is not code
    'note = "CURRENT_TIMESTAMP"',
    "`now` > 0 AND `user` = 'a'",            # quoted names are columns
    "now > 0 AND user = 'a' AND rand = 1",   # unquoted columns named like built-ins, not called
    "email LIKE '%@example.com'",
    "UNIX_TIMESTAMP(created) > 1700000000",  # the row's own value
    "created > '2024-01-01' + INTERVAL 1 DAY",
    "id > 0 /* before NOW() */",             # a comment
    "id > 0 -- NOW()\n AND v = 1",
    "db.f(v) > 1",                           # a stored function: for the server to judge
    "t.now > 1",
])
def test_a_predicate_of_the_row_alone_names_nothing(predicate):
    assert changing_parts(predicate) == []
