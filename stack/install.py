"""`stream-osc stack install`: the Kafka and Debezium jars from Maven Central, through `mvn`."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from stack.config import DEBEZIUM_VERSION, KAFKA_VERSION, StackConfig
from stack.process import StackError, tail

MAVEN_DIR = Path(__file__).resolve().parent / "maven"
STAMP = ".stream-osc-installed"


@dataclass(frozen=True)
class JarSet:
    """One folder of jars filled from one pom."""

    name: str
    pom: Path
    versions: dict[str, str]

    def target(self, config: StackConfig) -> Path:
        if self.name == "kafka":
            return config.kafka_jars_dir
        return config.jars_dir / "plugins" / "debezium-connector-mariadb"

    def stamp(self) -> str:
        """What the folder must have been built from: versions and the pom's hash."""
        digest = hashlib.sha256(self.pom.read_bytes()).hexdigest()
        return json.dumps({"versions": self.versions, "pom_sha256": digest}, sort_keys=True)


JAR_SETS = (
    JarSet("kafka", MAVEN_DIR / "kafka-pom.xml", {"kafka": KAFKA_VERSION}),
    JarSet("debezium", MAVEN_DIR / "debezium-pom.xml", {"debezium": DEBEZIUM_VERSION, "kafka": KAFKA_VERSION}),
)


def _is_current(jar_set: JarSet, config: StackConfig) -> bool:
    try:
        return (jar_set.target(config) / STAMP).read_text() == jar_set.stamp()
    except OSError:
        return False


def installed(config: StackConfig) -> bool:
    """True when every jar folder is filled and matches the pinned versions."""
    return all(_is_current(jar_set, config) for jar_set in JAR_SETS)


def install(config: StackConfig, force: bool = False) -> list[str]:
    """Fill the jar folders that are missing or stale; return one line per folder saying what happened."""
    lines = []
    for jar_set in JAR_SETS:
        target = jar_set.target(config)
        if not force and _is_current(jar_set, config):
            lines.append(f"{jar_set.name}: up to date in {target}")
            continue
        started = time.monotonic()
        count = _copy_dependencies(jar_set, target, config)
        lines.append(f"{jar_set.name}: {count} jars in {target} ({time.monotonic() - started:.1f} s)")
    return lines


def _copy_dependencies(jar_set: JarSet, target: Path, config: StackConfig) -> int:
    """Run mvn into a staging folder, then swap it in, so a failed run never leaves a half folder."""
    mvn = shutil.which("mvn")
    if not mvn:
        raise StackError("Maven is missing: no `mvn` on PATH; run `make setup` or `apt-get install maven`")
    if not shutil.which("java"):
        raise StackError("Java is missing: no `java` on PATH (Maven needs it); "
                         "run `make setup` or `apt-get install default-jre-headless`")
    staging = target.with_name(target.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    log = config.cache_dir / f"maven-{jar_set.name}.log"
    with open(log, "wb") as out:
        result = subprocess.run(
            [mvn, "-B", "-q", "-f", str(jar_set.pom), "dependency:copy-dependencies",
             f"-DoutputDirectory={staging}"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise StackError(f"mvn failed to fetch the {jar_set.name} jars (exit {result.returncode}); "
                         f"see {log}:\n{tail(log)}")
    jars = sorted(staging.glob("*.jar"))
    if not jars:
        raise StackError(f"mvn fetched no {jar_set.name} jars; see {log}")
    (staging / STAMP).write_text(jar_set.stamp())
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return len(jars)
