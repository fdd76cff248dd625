"""Keys at the ends of the signed and unsigned BIGINT ranges decode exactly."""
import pytest

from core.keys import KeyColumn, PrimaryKey
from streams.events import decode_key, encode_key

TOP = 2**64 - 1
ID = PrimaryKey((KeyColumn("id", "bigint", "bigint(20) unsigned", None, None),))


@pytest.mark.parametrize("raw, pk", [
    (b'{"id":18446744073709551615}', TOP),           # unsigned, sent as a plain decimal number
    (b'{"id":9223372036854775808}', 2**63),
    (b'{"id":1.8446744073709551615E+19}', TOP),     # a decimal in exponent form: never through a float
    (b'{"id":"18446744073709551614"}', TOP - 1),
    (b'{"id":-9223372036854775808}', -2**63),
    (b'{"id":0}', 0),
])
def test_decode_key_keeps_every_digit(raw, pk):
    assert decode_key(raw, ID).pk == (pk,)


def test_encode_key_writes_plain_digits():
    assert encode_key("id", TOP) == b'{"id":18446744073709551615}'


@pytest.mark.parametrize("raw", [b'{"id":1.5}', b'{"id":true}', b'{"id":null}'])
def test_decode_key_refuses_a_non_integer_key(raw):
    with pytest.raises(ValueError):
        decode_key(raw, ID)
