"""What a change of the source table's definition is reported as, and how its identity is looked up."""
from core.source_check import definition_changes, innodb_name, is_innodb_name_of

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


def test_names_are_encoded_as_innodb_keeps_them():
    """Checked against MariaDB 10.11's INNODB_SYS_TABLES: letters, digits and '_' as they are, every other
    character as @ and four hex digits."""
    assert innodb_name("shop", "Order_lines2") == "shop/Order_lines2"
    assert innodb_name("a-b", "x$y z") == "a@002db/x@0024y@0020z"
    assert innodb_name("shop", "日本") == "shop/@65e5@672c"


def test_a_name_with_a_letter_encoded_from_a_table_is_not_looked_up():
    assert innodb_name("shop", "café") is None


def test_windows_device_names_get_the_servers_suffix():
    assert innodb_name("shop", "aux") == "shop/aux@@@"
    assert innodb_name("NUL", "Com1") == "NUL@@@/Com1@@@"
    assert innodb_name("shop", "auxiliary") == "shop/auxiliary"


def test_partitions_belong_to_their_table_and_a_hash_in_a_name_does_not():
    assert is_innodb_name_of("shop/t", "shop/t")
    assert is_innodb_name_of("shop/t#P#p0", "shop/t")            # MariaDB
    assert is_innodb_name_of("shop/t#p#p0#sp#s1", "shop/t")      # MySQL, a subpartition
    assert not is_innodb_name_of("shop/t@0023p@0023x", "shop/t")  # the table `t#p#x`
    assert not is_innodb_name_of("shop/tt", "shop/t")
    assert not is_innodb_name_of("shop/T", "shop/t")


def test_a_foreign_key_added_either_way_is_named_and_an_earlier_record_without_them_compares():
    current = {**RECORDED, "foreign_keys": {"shop.fk_child": "shop.child REFERENCES shop.t ON DELETE CASCADE"}}
    assert definition_changes(RECORDED, current) == [
        "foreign key shop.fk_child added (shop.child REFERENCES shop.t ON DELETE CASCADE)"]
    assert definition_changes(RECORDED, {**RECORDED, "foreign_keys": {}}) == []


def test_a_trigger_changed_added_or_dropped_is_named():
    recorded = {**RECORDED, "triggers": {"t_bu": "BEFORE UPDATE #1, body aaa", "t_ad": "AFTER DELETE #1, body bbb"}}
    current = {**RECORDED, "triggers": {"t_bu": "BEFORE UPDATE #1, body ccc", "t_ai": "AFTER INSERT #1, body ddd"}}
    assert definition_changes(recorded, current) == [
        "trigger t_ai added (AFTER INSERT #1, body ddd)",
        "trigger t_ad dropped",
        "trigger t_bu changed from BEFORE UPDATE #1, body aaa to BEFORE UPDATE #1, body ccc",
    ]


def test_triggers_are_not_compared_while_a_stopped_move_left_its_guards():
    """Resume or abort puts the set back first (core/triggers.py: settle_triggers); the guards refuse writes."""
    recorded = {**RECORDED, "triggers": {"t_bu": "BEFORE UPDATE #1, body aaa"}}
    current = {**RECORDED, "triggers": {"stream_osc_guard_7_bu": "BEFORE UPDATE #1, body g"}}
    assert definition_changes(recorded, current) == []
