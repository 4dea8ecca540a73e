"""Move the vendored Kafka message specs and error-code table to one Apache Kafka release.

Every JSON file already in ``tools/kafka-specs/`` is replaced by the same file from the
``kafka-clients`` jar of that release (``common/message/``), and ``kafka-error-codes.tsv`` is
written anew from that jar's ``Errors`` enum (``tools/kafka_release/ErrorCodes.java``, run with
``java``), so specs and error codes always come from one release. Then run ``make gen`` and
update the release named in ``tools/kafka-specs/README.md``.

The jar is read from the broker cache the tests fill (``~/.cache/aiokprod/kafka-VERSION/libs``,
``tests/support/kafka_jars.py``); ``--libs`` points elsewhere. Needs Java 17+.

    python tools/vendor_kafka_specs.py --version 4.4.0
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "tools" / "kafka-specs"
EXTRACTOR = ROOT / "tools" / "kafka_release" / "ErrorCodes.java"


def default_libs(version: str) -> Path:
    base = os.environ.get("AIOKPROD_KAFKA_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aiokprod"
    return Path(base) / f"kafka-{version}" / "libs"


def vendor(version: str, libs: Path) -> list[str]:
    """Replace the specs and the error table; returns the names of the files rewritten."""
    clients = libs / f"kafka-clients-{version}.jar"
    if not clients.is_file():
        raise SystemExit(f"{clients} not found: resolve the release first (the Kafka test "
                         f"fixtures do, or `make kafka`)")
    changed = []
    with zipfile.ZipFile(clients) as jar:
        for spec in sorted(SPECS.glob("*.json")):
            data = jar.read(f"common/message/{spec.name}")
            if spec.read_bytes() != data:
                spec.write_bytes(data)
                changed.append(spec.name)
    slf4j = sorted(libs.glob("slf4j-api-*.jar"))  # Errors logs through slf4j when loaded
    classpath = os.pathsep.join(str(p) for p in [clients, *slf4j[:1]])
    table = subprocess.run(["java", "-cp", classpath, str(EXTRACTOR)], check=True,
                           capture_output=True, text=True, timeout=120).stdout
    tsv = SPECS / "kafka-error-codes.tsv"
    if tsv.read_text() != table:
        tsv.write_text(table)
        changed.append(tsv.name)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True, help="Apache Kafka release, e.g. 4.4.0")
    parser.add_argument("--libs", type=Path, help="directory holding kafka-clients-VERSION.jar")
    args = parser.parse_args(argv)
    changed = vendor(args.version, args.libs or default_libs(args.version))
    for name in changed:
        print(f"updated {name}")
    print(f"{len(changed)} file(s) from Kafka {args.version}; now run `make gen` and name the "
          f"release in tools/kafka-specs/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
