"""The stack refuses a Java older than Kafka 4 needs, naming the binary and its version (stack/java.py)."""
from __future__ import annotations

import pytest

from stack import java
from stack.process import StackError


@pytest.mark.parametrize("output, major", [
    ('openjdk version "17.0.13" 2024-10-15\nOpenJDK Runtime Environment', 17),
    ('openjdk version "21" 2023-09-19', 21),
    ('java version "1.8.0_392"\nJava(TM) SE Runtime Environment', 8),
    ('openjdk version "11.0.21" 2023-10-17', 11),
    ("no version here", None),
])
def test_the_major_version_is_read_from_java_version_output(output, major):
    assert java.java_major(output) == major


def fake_java(tmp_path, shown: str):
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    binary = home / "bin" / "java"
    binary.write_text(f"#!/bin/sh\necho '{shown}' >&2\n")
    binary.chmod(0o755)
    return home, binary


def test_a_java_older_than_17_is_refused_with_its_path_and_version(tmp_path, monkeypatch):
    home, binary = fake_java(tmp_path, 'openjdk version "11.0.21" 2023-10-17')
    monkeypatch.setenv("JAVA_HOME", str(home))
    with pytest.raises(StackError, match=f"{binary} is Java 11: Kafka and Kafka Connect need Java 17 or newer"):
        java.java_binary()


def test_java_17_is_taken(tmp_path, monkeypatch):
    home, binary = fake_java(tmp_path, 'openjdk version "17.0.13" 2024-10-15')
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert java.java_binary() == str(binary)
