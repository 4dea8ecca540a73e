# The two commands a newcomer runs: `make demo` and `make test`.
# PYTHON makes .venv: a command or a version (python3.12, 3.12), found by tools/find_python.sh
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
FIND_PYTHON := sh tools/find_python.sh
# the native extension: _speedups.pyx and the files it includes
NATIVE_SOURCES := $(wildcard aiokprod/_native/*.pyx aiokprod/_native/*.pxi)

# Where Python keeps the bytecode it compiles: .pycache/ (PYTHONPYCACHEPREFIX; the tree and the
# venvs get no __pycache__), written even where the environment says PYTHONDONTWRITEBYTECODE=1,
# as on this project's machines. Without it every process compiled every module it imported
# again: collecting the suite took 8.7 s of CPU in each of make test's pytest processes instead
# of 3.3, `import aiokprod.spark` (each Spark write's planning and commit processes, each
# Python worker of an executor) 1.1 s instead of 0.6; test_spark_sink.py 29.7 s of CPU, 25.9.
PYTHONPYCACHEPREFIX ?= $(CURDIR)/.pycache
export PYTHONPYCACHEPREFIX
export PYTHONDONTWRITEBYTECODE :=

# Every Python we claim (pyproject.toml's classifiers and cibuildwheel's `build`;
# tests/unit/test_supported_pythons.py keeps the three equal).
SUPPORTED_PYTHONS := 3.10 3.11 3.12 3.13
PYTEST_FLAGS := -q -p no:cacheprovider
# The edit loop: the pure parts and every protocol message (`make test-quick`).
QUICK_TESTS := tests/unit tests/protocol
# What the native twins (aiokprod/_native) change: the pure parts, where each twin is compared
# with its native side, and the producer end to end against a real Tansu broker. `make test`
# runs these again with AIOKPROD_NO_EXTENSIONS=1, the path an install without a compiler takes.
PURE_PYTHON_TESTS := $(QUICK_TESTS) tests/integration/test_producer_tansu.py
# What each other supported Python runs, in its own .venv-X.Y on the native path built for it:
# the above plus the producer with transactions against Tansu.
TIER_TESTS := $(PURE_PYTHON_TESTS) tests/integration/test_transactions_tansu.py
# The checks of the source tree (marker `static`: import graph, docs build, typing, metadata)
# are the same on every Python and encoder: only the main run has them.
TIER_MARKS := -m 'not slow and not static'
# The tiers and the pure-Python pass show the code works on that Python or encoder; the main run
# proves each property at its full count (tests/support/examples.py), these at a tenth of it.
TIER_EXAMPLES := AIOKPROD_EXAMPLES_FRACTION=0.1

.PHONY: test test-caches test-suite test-mypy test-bytecode test-main test-beside test-quick test-other-pythons test-pure-python demo kafka gen \
	docs bench bench-spark clean

# setup.py builds the native extension (aiokprod/_native) in place when a compiler exists.
# The venvs are filled by uv, a pip-compatible installer that downloads and builds in parallel
# and does not byte-compile ahead: 31 s from empty caches where pip took 58, most of either
# pyspark, which PyPI has only as source. pip stays in each venv for what users run; the example
# tests install with uv what an example's `pip install` line names (tests/support/example_venv.py).
UV := $(VENV)/bin/uv
$(STAMP): pyproject.toml setup.py $(NATIVE_SOURCES)
	test -x $(PY) || { py=$$($(FIND_PYTHON) '$(PYTHON)') && "$$py" -m venv $(VENV); }
	test -x $(UV) || $(PY) -m pip install -q --disable-pip-version-check uv
	$(UV) pip install -q -p $(PY) --upgrade-package pip pip -e '.[test]'
	touch $(STAMP)

# Two lanes from the start: one fills the caches the Apache Kafka and Schema Registry fixtures
# need (support.warm_caches, on the Python that makes .venv; nothing when they are complete),
# the other makes .venv and runs the suite: from empty caches the registry is built before the
# suite needs it, while its downloads make uv's install 12 s longer. A fixture that
# gets to a cache first waits on its lock for that lane, so the suite never waits for the lane
# as a whole. (A shell job, not make -j2: test-suite's own -j2 would reset the jobserver.)
test:
	@$(MAKE) --no-print-directory test-caches & caches=$$!; \
	$(MAKE) --no-print-directory test-suite; suite=$$?; \
	wait $$caches; caches=$$?; \
	if [ $$suite -ne 0 ]; then exit $$suite; fi; exit $$caches

test-caches:
	@py=$$($(FIND_PYTHON) '$(PYTHON)') && cd tests && "$$py" -m support.warm_caches

# The generated files, ruff and mypy; then two runs side by side (make -j2): the whole suite,
# once, on .venv's Python with the native path (brokers, Spark, the examples in clean venvs and
# the static checks), and beside it the tiers of every other supported Python followed by the
# pure-Python pass. The main run spends most of its time waiting for JVMs, Spark and timeouts
# with one core idle, which the CPU-bound tiers fill; the tiers' output goes to
# $(BESIDE_LOG), summed up when they end and printed whole if they fail. Any pytest exit but 0
# fails make, 5 (no test ran) included.
test-suite: $(STAMP)
ifneq ($(origin PYTHON),file)
	@# PYTHON given on the command line or in the environment: .venv must be that Python
	@py=$$($(FIND_PYTHON) '$(PYTHON)') && \
	want=$$("$$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') && \
	have=$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])') && \
	if [ "$$want" != "$$have" ]; then \
		echo "make: .venv runs Python $$have, not $(PYTHON) ($$want): rm -rf $(VENV) first" >&2; \
		exit 1; fi
endif
	$(PY) tools/gen_protocol.py --check
	$(PY) tools/gen_config_docs.py --check
	$(PY) tools/gen_error_docs.py --check
	$(VENV)/bin/ruff check aiokprod tests tools benchmarks examples setup.py
	@$(MAKE) --no-print-directory -j2 test-mypy test-bytecode
	@$(MAKE) --no-print-directory -j2 test-main test-beside

test-mypy: $(STAMP)
	$(VENV)/bin/mypy

# Beside mypy, one collection of the suite on .venv's Python fills .pycache/ with the bytecode
# of the test modules (as pytest rewrites their asserts), the package and what they import: the
# main run's four workers, which start together, then each collect in 3.3 s of CPU, not 8.7.
# Quiet; if it fails (a test module that cannot be imported) the end of its output is printed.
test-bytecode: $(STAMP)
	@out=$$($(VENV)/bin/pytest -qq -p no:cacheprovider --collect-only 2>&1) || \
		{ echo "$$out" | tail -n 60 >&2; exit 1; }

# The main run's pytest-xdist workers. Whole files go to a worker (--dist loadfile), so a
# file's module fixtures (a private cluster, a Spark session) start once; each worker starts
# the session brokers it needs. Most of a file's time is waiting for JVMs, Spark and bounded
# timeouts, so four files at a time, beside the CPU-bound tiers, fill the cores one did not.
# With two the main run went on alone for minutes after the tiers; with three it was still the
# longer lane by two minutes once uv made the tier venvs quick (582 s against 457 s, cold caches),
# with four the two lanes end together (552 and 551 s): docs/testing.md has them measured.
# MAIN_WORKERS=0: one process.
# --no-loadscope-reorder: files go out in collection order, the longest first (tests/conftest.py);
# by default pytest-xdist sorts them by their number of tests, which sent the 1-test Spark
# cluster file (80 s) and the 5-test FastAPI file (160 s) out behind ~70 short files.
MAIN_WORKERS ?= 4
test-main: $(STAMP)
	@echo "== main run: the whole suite on $$($(PY) -V), native path, $(MAIN_WORKERS) workers;" \
		"beside it, in $(BESIDE_LOG): the other Pythons' tiers and the pure-Python pass"
	$(VENV)/bin/pytest $(PYTEST_FLAGS) -n $(MAIN_WORKERS) --dist loadfile --no-loadscope-reorder

# The sub-make shares test-suite's two job slots, so once the main run ends the pure-Python pass
# starts beside the tier still running. --output-sync=target writes each pytest run's output to
# the log in one piece when it ends (run-python-%, test-pure-python): each result line follows
# its own "== " header (interleaved, a summary put the pure pass's count under Python 3.13).
BESIDE_LOG := .test-beside.log
test-beside: $(STAMP)
	@started=$$(date +%s); \
	$(MAKE) --no-print-directory --output-sync=target test-other-pythons test-pure-python \
		>$(BESIDE_LOG) 2>&1; \
	rc=$$?; took=$$(( $$(date +%s) - started )); \
	if [ $$rc -eq 0 ]; then \
		echo "== beside the main run, passed in $${took}s ($(BESIDE_LOG)):"; \
		grep -E '^(== |SKIPPED )|(passed|failed|error).* in [0-9.]+s' $(BESIDE_LOG); \
	else \
		echo "== beside the main run, FAILED after $${took}s: $(BESIDE_LOG) follows" >&2; \
		cat $(BESIDE_LOG) >&2; \
	fi; \
	exit $$rc

# The edit loop: unit + protocol on .venv's native path, static checks left out, the three
# hypothesis state machines at 30 examples each instead of 100-300 (`make test` runs them all).
test-quick: $(STAMP)
	AIOKPROD_MACHINE_EXAMPLES=30 $(VENV)/bin/pytest $(PYTEST_FLAGS) $(TIER_MARKS) $(QUICK_TESTS)

test-pure-python: $(STAMP)
	@echo "== pure Python (AIOKPROD_NO_EXTENSIONS=1): $(PURE_PYTHON_TESTS)"
	AIOKPROD_NO_EXTENSIONS=1 $(TIER_EXAMPLES) $(VENV)/bin/pytest $(PYTEST_FLAGS) $(TIER_MARKS) $(PURE_PYTHON_TESTS)

# The tiers on every supported Python but .venv's. A Python this machine lacks is skipped with
# one line saying so, except under CI=true, where it fails the run (CI must prove each one).
test-other-pythons: $(STAMP)
	@main=$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])') && \
	for version in $(SUPPORTED_PYTHONS); do \
		[ "$$version" = "$$main" ] || $(MAKE) --no-print-directory test-python-$$version || exit 1; \
	done

test-python-%:
	@if ! $(FIND_PYTHON) $* >/dev/null; then \
		case "$${CI:-}" in [Tt][Rr][Uu][Ee]) \
			echo "make: Python $* is missing; with CI=true that is a failure" >&2; exit 1;; \
		esac; \
		echo "SKIPPED Python $*: not found (tools/find_python.sh $*); CI=true fails instead"; \
		exit 0; \
	fi; \
	$(MAKE) --no-print-directory .venv-$*/.installed-stamp && \
	$(MAKE) --no-print-directory run-python-$*

run-python-%:
	@echo "== Python $*: $(TIER_TESTS)"
	$(TIER_EXAMPLES) .venv-$*/bin/pytest $(PYTEST_FLAGS) $(TIER_MARKS) $(TIER_TESTS)

# only what the tiers need (the `test-tiers` extra), not Spark, the docs toolchain or linters;
# made and filled by .venv's uv: the tiers install nothing with pip, and `python -m venv`'s
# ensurepip cost 2.2 s of CPU per venv, where uv makes one in 0.01 s
.venv-%/.installed-stamp: pyproject.toml setup.py $(NATIVE_SOURCES) | $(STAMP)
	test -x .venv-$*/bin/python || { py=$$($(FIND_PYTHON) $*) && \
		$(UV) venv -q --allow-existing -p "$$py" .venv-$*; }
	@# -g0 after the Python's own CFLAGS (its -g): debug information changes no generated code,
	@# and leaving it out takes 2 s of CPU off each compile of the extension (8.6 s to 6.5)
	CFLAGS="$${CFLAGS:-} -g0" $(UV) pip install -q -p .venv-$*/bin/python -e '.[test-tiers]'
	touch $@

demo: $(STAMP)
	$(PY) -m aiokprod perf --num-records 100000

# Apache Kafka (KRaft) in the foreground for manual runs; needs Java 17+ (and Maven once, to
# fetch the jars into ~/.cache/aiokprod). KAFKA_ARGS="--brokers 3" or "--secure" for more.
kafka: $(STAMP)
	cd tests && ../$(PY) -m support.run_kafka $(KAFKA_ARGS)

gen: $(STAMP)
	$(PY) tools/gen_protocol.py
	$(PY) tools/gen_config_docs.py
	$(PY) tools/gen_error_docs.py

# The documentation site (mkdocs.yml) into site/; --strict: a broken link, a page left out of the
# nav or a docstring that does not render fails it. `$(VENV)/bin/mkdocs serve` previews it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/run.py

# The PySpark sink beside Spark's own JVM Kafka sink (docs/performance.md). It needs pyspark 4.2.0
# (the newest release whose spark-sql-kafka-0-10 is on Maven Central): the script makes its own
# venv in ~/.cache/aiokprod/bench-venv-spark-4.2.0 and resolves the connector with Maven once.
bench-spark: $(STAMP)
	$(PY) benchmarks/spark_sink.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-* build site *.egg-info .mypy_cache .ruff_cache .pytest_cache .pycache $(BESIDE_LOG) \
		aiokprod/_native/*.so aiokprod/_native/*.c
