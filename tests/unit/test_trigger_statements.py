"""How a recorded trigger is created again: as its definer, under its own name or another, in its place."""
from core.triggers import Trigger, create_statement, definer_clause, encoding_of, guard_message, guard_names

TRIGGER = Trigger(name="Audit_ai", timing="AFTER", event="INSERT", order=2,
                  body="INSERT INTO audit (note) VALUES ('i' || NEW.seq)", definer="app@10.0.%",
                  sql_mode="PIPES_AS_CONCAT", character_set_client="latin1", collation_connection="latin1_swedish_ci",
                  database_collation="utf8mb4_general_ci")


def test_the_statement_names_the_definer_table_and_body_as_recorded():
    assert create_statement(TRIGGER, "shop", "orders_osc_new") == (
        "CREATE DEFINER=`app`@`10.0.%` TRIGGER `shop`.`Audit_ai` AFTER INSERT ON `shop`.`orders_osc_new` "
        "FOR EACH ROW INSERT INTO audit (note) VALUES ('i' || NEW.seq)")
    assert "TRIGGER `shop`.`probe` AFTER INSERT" in create_statement(TRIGGER, "shop", "t", name="probe")


def test_a_user_name_holding_an_at_sign_and_a_role_are_quoted_whole():
    assert definer_clause("a@b@localhost") == "DEFINER=`a@b`@`localhost`"
    assert definer_clause("auditor_role") == "DEFINER=`auditor_role`"


def test_the_body_is_sent_in_the_character_set_it_was_made_with():
    assert encoding_of(TRIGGER) == "cp1252"
    assert encoding_of(Trigger(**{**TRIGGER.as_dict(), "character_set_client": "utf8mb4"})) == "utf-8"
    assert encoding_of(Trigger(**{**TRIGGER.as_dict(), "character_set_client": "no_such_set"})) is None


def test_guards_have_short_unique_names_and_a_message_signal_accepts():
    assert guard_names(12) == ["stream_osc_guard_12_bi", "stream_osc_guard_12_bu", "stream_osc_guard_12_bd"]
    assert max(len(n) for n in guard_names(10**12)) <= 64
    assert len(guard_message(3, "d" * 64, "t" * 64)) <= 128
