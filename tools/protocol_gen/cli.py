"""``python tools/gen_protocol.py [--check]``: generate everything, or report what would change.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from .error_classes import generate_errors
from .messages import generate_protocol
from .model import SpecError
from .paths import (
    DEFAULT_ERROR_CATEGORIES,
    DEFAULT_ERROR_CODES,
    DEFAULT_SPECS,
    GENERATED_DIR,
    REPO,
)


def generate_all(specs: Path, tsv: Path, root: Path,
                 categories: Path = DEFAULT_ERROR_CATEGORIES) -> dict[Path, str]:
    files = generate_protocol(specs)
    files.update(generate_errors(tsv, root, categories))
    return files


def stale_files(root: Path, files: Iterable[Path]) -> list[Path]:
    wanted = {p for p in files if p.parent == GENERATED_DIR}
    existing = {
        p.relative_to(root) for p in (root / GENERATED_DIR).glob("*.py")
    } if (root / GENERATED_DIR).is_dir() else set()
    return sorted(existing - wanted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--specs", type=Path, default=DEFAULT_SPECS)
    parser.add_argument("--error-codes", type=Path, default=DEFAULT_ERROR_CODES)
    parser.add_argument("--error-categories", type=Path, default=DEFAULT_ERROR_CATEGORIES)
    parser.add_argument("--root", type=Path, default=REPO, help="repository root to write into")
    parser.add_argument("--check", action="store_true", help="fail if the output would change")
    args = parser.parse_args(argv)
    root: Path = args.root
    try:
        files = generate_all(args.specs, args.error_codes, root, args.error_categories)
    except SpecError as exc:
        print(f"gen_protocol: {exc}", file=sys.stderr)
        return 2
    stale = stale_files(root, files)
    if args.check:
        differing = [
            p for p, text in sorted(files.items())
            if not (root / p).is_file() or (root / p).read_text(encoding="utf-8") != text
        ]
        for p in differing:
            print(f"gen_protocol --check: {p} would change", file=sys.stderr)
        for p in stale:
            print(f"gen_protocol --check: {p} is stale (no spec generates it)", file=sys.stderr)
        return 1 if differing or stale else 0
    (root / GENERATED_DIR).mkdir(parents=True, exist_ok=True)
    for p, text in sorted(files.items()):
        target = root / p
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
    for p in stale:
        (root / p).unlink()
    return 0
