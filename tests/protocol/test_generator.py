"""tools/gen_protocol.py: the committed output is current, --check notices drift and stale
files, and the spec parser refuses what it does not understand."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

# the generator is a tool run on .venv's Python (`make gen`), not part of the package: the same
# on every Python and encoder, so `make test` runs these once
pytestmark = pytest.mark.static

REPO = Path(__file__).resolve().parents[2]
# the vendored specs (tools/kafka-specs/README.md): the generator needs nothing outside the repo
SPECS = REPO / "tools" / "kafka-specs"
TSV = SPECS / "kafka-error-codes.tsv"
GENERATED_ERRORS = ("aiokprod/_error_codes.py", "aiokprod/_broker_errors.py")
HAND_WRITTEN_ERRORS = ("aiokprod/_error_base.py", "aiokprod/errors.py")


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_protocol", REPO / "tools/gen_protocol.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_protocol"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """The generated files (and the hand-written error modules they must not clash with)
    under a temp root."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "aiokprod/protocol/_generated", root / "aiokprod/protocol/_generated",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for rel in GENERATED_ERRORS + HAND_WRITTEN_ERRORS:
        shutil.copy(REPO / rel, root / rel)
    return root


def run(gen: ModuleType, *args: str) -> int:
    return int(gen.main([*args, "--specs", str(SPECS), "--error-codes", str(TSV)]))


def test_committed_output_is_current(gen: ModuleType) -> None:
    assert run(gen, "--check", "--root", str(REPO)) == 0


def test_check_fails_on_an_edited_generated_file(
    gen: ModuleType, tree_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(gen, "--check", "--root", str(tree_copy)) == 0
    target = tree_copy / "aiokprod/protocol/_generated/produce.py"
    target.write_text(target.read_text() + "# hand edit\n")
    errors = tree_copy / "aiokprod/_broker_errors.py"
    errors.write_text(errors.read_text().replace("code = 6\n", "code = 66\n"))
    assert run(gen, "--check", "--root", str(tree_copy)) == 1
    err = capsys.readouterr().err
    assert "_generated/produce.py would change" in err
    assert "aiokprod/_broker_errors.py would change" in err
    # Regenerating repairs both, and the check passes again.
    assert run(gen, "--root", str(tree_copy)) == 0
    assert run(gen, "--check", "--root", str(tree_copy)) == 0


def test_check_fails_on_a_stale_generated_file(
    gen: ModuleType, tree_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tree_copy / "aiokprod/protocol/_generated/fetch.py").write_text("# left over\n")
    assert run(gen, "--check", "--root", str(tree_copy)) == 1
    assert "fetch.py is stale" in capsys.readouterr().err


def test_output_is_deterministic(gen: ModuleType) -> None:
    first = gen.generate_all(SPECS, TSV, REPO)
    second = gen.generate_all(SPECS, TSV, REPO)
    assert first == second
    assert all(
        text.startswith("# DO NOT EDIT") for path, text in first.items()
        if "_generated" in str(path)
    )
    assert "02_produce_v14_kip1269.json" in first[Path("aiokprod/protocol/_generated/produce.py")]


def _spec_copy(tmp_path: Path) -> Path:
    specs = tmp_path / "specs"
    shutil.copytree(SPECS, specs)
    return specs


@pytest.mark.parametrize("where", ["field", "top"])
def test_unknown_spec_key_fails_naming_file_and_key(
    gen: ModuleType, tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = _spec_copy(tmp_path)
    path = specs / "EndTxnRequest.json"
    doc = json.loads(gen.strip_comments(path.read_text()))
    if where == "field":
        doc["fields"][1]["frobnicate"] = True
    else:
        doc["frobnicate"] = True
    path.write_text(json.dumps(doc))
    code = gen.main(["--check", "--specs", str(specs), "--error-codes", str(TSV),
                     "--root", str(REPO)])
    assert code == 2
    err = capsys.readouterr().err
    assert "EndTxnRequest.json" in err and "'frobnicate'" in err


def test_tagged_field_outside_flexible_versions_is_refused(
    gen: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = _spec_copy(tmp_path)
    path = specs / "SaslHandshakeResponse.json"
    doc = json.loads(gen.strip_comments(path.read_text()))
    doc["fields"][0].update({"tag": 0, "taggedVersions": "0+"})
    path.write_text(json.dumps(doc))
    assert gen.main(["--specs", str(specs), "--error-codes", str(TSV), "--root",
                     str(tmp_path), "--check"]) == 2
    assert "flexible" in capsys.readouterr().err


def test_comment_stripping_respects_strings(gen: ModuleType) -> None:
    text = '{"about": "see http://x // not a comment", // a comment\n "n": 1}'
    assert json.loads(gen.strip_comments(text)) == {"about": "see http://x // not a comment",
                                                    "n": 1}


def test_version_ranges(gen: ModuleType) -> None:
    v = gen.Versions
    assert v.parse("3+", "t").describe() == "3+"
    assert 5 in v.parse("3-7", "t") and 8 not in v.parse("3-7", "t")
    assert v.parse("none", "t").empty
    assert v.parse("4", "t").describe() == "4"
    with pytest.raises(gen.SpecError):
        v.parse("x-1", "t")


def test_entry_point_runs_as_a_script_from_any_directory(tmp_path: Path) -> None:
    """`python tools/gen_protocol.py --check` (make test, make gen) finds its package
    tools/protocol_gen wherever it is started from, and fails on drift."""
    import subprocess

    script = str(REPO / "tools" / "gen_protocol.py")
    ok = subprocess.run([sys.executable, script, "--check"], check=False, cwd=tmp_path,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    root = tmp_path / "repo"
    shutil.copytree(REPO / "aiokprod/protocol/_generated", root / "aiokprod/protocol/_generated",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for rel in GENERATED_ERRORS + HAND_WRITTEN_ERRORS:
        shutil.copy(REPO / rel, root / rel)
    (root / "aiokprod/_error_codes.py").write_text("# hand edit\n")
    bad = subprocess.run([sys.executable, script, "--check", "--root", str(root)],
                         check=False, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1
    assert "aiokprod/_error_codes.py would change" in bad.stderr


def test_a_hand_written_error_class_may_not_share_a_generated_name(
    gen: ModuleType, tree_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """errors.py re-exports the generated classes with a star import, so a hand-written class
    of the same name would silently shadow one: the generator refuses instead."""
    errors = tree_copy / "aiokprod/errors.py"
    errors.write_text(errors.read_text() + "\n\nclass NotLeaderOrFollowerError(KafkaError):\n"
                      "    pass\n")
    assert run(gen, "--check", "--root", str(tree_copy)) == 2
    assert "NotLeaderOrFollowerError for NOT_LEADER_OR_FOLLOWER collides" in (
        capsys.readouterr().err)


def _categories_table(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "error-categories.tsv"
    path.write_text("name\tcategory\twhy\n" + "".join(f"{line}\n" for line in lines))
    return path


@pytest.mark.parametrize(("line", "complaint"), [
    ("NOT_A_CODE\tfatal\tbecause", "no error code named"),
    ("PRODUCER_FENCED\tdoomed\tbecause", "category must be one of"),
    ("PRODUCER_FENCED\tretriable\tbecause", "not retriable for the broker"),
    ("PRODUCER_FENCED\tfatal\t ", "say why"),
])
def test_the_category_table_is_checked(gen: ModuleType, tree_copy: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str], line: str,
                                       complaint: str) -> None:
    """Each override names a real code, a KIP-1050 category and why; it may not call a code
    retriable that the broker deems not (``category`` and ``retriable`` would disagree)."""
    table = _categories_table(tmp_path, line)
    assert run(gen, "--check", "--root", str(tree_copy), "--error-categories", str(table)) == 2
    assert complaint in capsys.readouterr().err


def test_a_changed_category_changes_the_generated_class(gen: ModuleType, tree_copy: Path,
                                                        tmp_path: Path) -> None:
    """Without the overrides, PRODUCER_FENCED falls back to the default (abortable, as any
    code the broker deems not retriable), and --check notices."""
    table = _categories_table(tmp_path)
    assert run(gen, "--check", "--root", str(tree_copy), "--error-categories", str(table)) == 1
    assert run(gen, "--root", str(tree_copy), "--error-categories", str(table)) == 0
    text = (tree_copy / "aiokprod/_broker_errors.py").read_text()
    fenced = text[text.index("class ProducerFencedError"):]
    assert "category = ErrorCategory.ABORTABLE" in fenced[:fenced.index("message =")]
