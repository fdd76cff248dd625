"""Running the Kafka broker and the Connect worker from the jar folder: java binary, classpath, JVM flags."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from stack.config import StackConfig
from stack.install import installed
from stack.process import StackError

JAVA_MISSING = ("Java is missing: no `java` on PATH (Kafka and Kafka Connect need it); "
                "run `make setup` or `apt-get install default-jre-headless`")
JAVA_NEEDED = 17   # Kafka 4 brokers and Connect workers run on Java 17 or newer


def java_major(version_output: str) -> int | None:
    """The major version in `java -version`'s output (`"17.0.9"` is 17, the old `"1.8.0_392"` is 8); None if
    there is none."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


@cache
def _checked(java: str) -> str:
    """`java`, once its version is known to be new enough; StackError naming it and its version otherwise."""
    try:
        shown = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"{java} does not run ({exc.__class__.__name__}): Kafka and Kafka Connect need Java "
                         f"{JAVA_NEEDED} or newer") from None
    major = java_major(shown.stderr + shown.stdout)
    if major is None or major < JAVA_NEEDED:
        raise StackError(f"{java} is Java {major if major is not None else '(version not shown)'}: Kafka and Kafka "
                         f"Connect need Java {JAVA_NEEDED} or newer; install default-jre-headless (OpenJDK 17 on "
                         f"Debian 12) and set JAVA_HOME to it, or put its java first on PATH")
    return java


def java_binary() -> str:
    """$JAVA_HOME/bin/java, else `java` from PATH, once it is Java 17 or newer; StackError saying how to install it
    otherwise."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home, "bin", "java"), os.X_OK):
        return _checked(str(Path(home, "bin", "java")))
    found = shutil.which("java")
    if not found:
        raise StackError(JAVA_MISSING)
    return _checked(found)


def require_jars(config: StackConfig) -> None:
    """StackError unless `stream-osc stack install` has filled the jar folders."""
    if not installed(config):
        raise StackError(f"the Kafka/Debezium jars are not installed in {config.jars_dir}: "
                         "run `stream-osc stack install` (or `make setup`)")


def render_log4j2(level: str = "INFO") -> str:
    """log4j2 configuration: everything to stdout (which the service's log file receives)."""
    return f"""\
# written by stream-osc (stack/java.py)
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRefs = out
rootLogger.appenderRef.out.ref = OUT
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


def java_command(config: StackConfig, main_class: str, log4j2_file: Path, *args: str,
                 heap: str | None = None) -> list[str]:
    """`java … -cp <kafka jars>/* <main_class> args…` with the stack's heap size (or `heap`)."""
    heap = heap or config.java_heap
    return [java_binary(), f"-Xmx{heap}",
            "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j2_file}",
            "-cp", f"{config.kafka_jars_dir}/*", main_class, *args]
