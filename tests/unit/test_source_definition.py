"""What a change of the source table's definition is reported as."""
from core.state import definition_changes

RECORDED = {"columns": {"id": "bigint(20) NOT NULL auto_increment", "k": "int(11) NOT NULL DEFAULT 0",
                        "legacy": "varchar(20) NULL DEFAULT NULL"},
            "keys": {"PRIMARY": "UNIQUE (id)", "k": "(k)"}}


def test_same_definition_is_no_change():
    assert definition_changes(RECORDED, RECORDED) == []


def test_added_dropped_and_changed_columns_and_keys_are_named():
    current = {"columns": {"id": "bigint(20) NOT NULL auto_increment", "k": "bigint(20) NOT NULL DEFAULT 0",
                           "extra": "int(11) NULL"},
               "keys": {"PRIMARY": "UNIQUE (id)", "k": "(k)", "extra": "UNIQUE (extra)"}}
    assert definition_changes(RECORDED, current) == [
        "column extra added (int(11) NULL)",
        "column legacy dropped",
        "column k changed from int(11) NOT NULL DEFAULT 0 to bigint(20) NOT NULL DEFAULT 0",
        "key extra added (UNIQUE (extra))",
    ]


def test_a_dropped_table_is_reported_as_gone():
    assert definition_changes(RECORDED, {"columns": {}, "keys": {}}) == ["the table is gone"]
