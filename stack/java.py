"""Running the Kafka broker and the Connect worker from the jar folder: java binary, classpath, JVM flags."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from stack.config import StackConfig
from stack.install import installed
from stack.process import StackError

JAVA_MISSING = ("Java is missing: no `java` on PATH (Kafka and Kafka Connect need it); "
                "run `make setup` or `apt-get install default-jre-headless`")


def java_binary() -> str:
    """$JAVA_HOME/bin/java, else `java` from PATH; StackError saying how to install it otherwise."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home, "bin", "java"), os.X_OK):
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if not found:
        raise StackError(JAVA_MISSING)
    return found


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
