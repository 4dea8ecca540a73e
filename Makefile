# The two commands a newcomer runs: `make demo` and `make test`.
# PYTHON makes .venv: a command or a version (python3.12, 3.12), found by tools/find_python.sh
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
FIND_PYTHON := sh tools/find_python.sh
# the native extension: _speedups.pyx and the files it includes
NATIVE_SOURCES := $(wildcard aiokprod/_native/*.pyx aiokprod/_native/*.pxi)

# Every Python we claim (pyproject.toml's classifiers and cibuildwheel's `build`;
# tests/unit/test_supported_pythons.py keeps the three equal). `make test` runs the whole suite on
# .venv's Python and, on each of the others in its own .venv-X.Y, the tiers below: the pure
# parts, every protocol message, and the producer (with transactions) against a real Tansu
# broker, on the native path built for that Python.
SUPPORTED_PYTHONS := 3.10 3.11 3.12 3.13
OTHER_PYTHON_TESTS := tests/unit tests/protocol tests/integration/test_producer_tansu.py \
	tests/integration/test_transactions_tansu.py

.PHONY: test test-other-pythons demo kafka lint typecheck unit gen docs bench bench-spark clean

# setup.py builds the native extension (aiokprod/_native) in place when a compiler exists
$(STAMP): pyproject.toml setup.py $(NATIVE_SOURCES)
	test -x $(PY) || { py=$$($(FIND_PYTHON) '$(PYTHON)') && "$$py" -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# The suite runs twice: on the native path, then on the pure-Python one (what an install
# without a compiler runs); before it, the other supported Pythons run their tiers (a few
# minutes each, so a Python-specific break shows before the long run). Any pytest exit but 0
# stops make, 5 (no test ran) included.
test: $(STAMP)
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
	$(VENV)/bin/mypy
	$(MAKE) --no-print-directory test-other-pythons
	$(VENV)/bin/pytest -q -p no:cacheprovider
	AIOKPROD_NO_EXTENSIONS=1 $(VENV)/bin/pytest -q -p no:cacheprovider

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
	echo "== Python $*: $(OTHER_PYTHON_TESTS)" && \
	.venv-$*/bin/pytest -q -p no:cacheprovider $(OTHER_PYTHON_TESTS)

.venv-%/.installed-stamp: pyproject.toml setup.py $(NATIVE_SOURCES)
	test -x .venv-$*/bin/python || { py=$$($(FIND_PYTHON) $*) && "$$py" -m venv .venv-$*; }
	.venv-$*/bin/python -m pip install -q --upgrade pip
	.venv-$*/bin/python -m pip install -q -e '.[test]'
	touch $@

demo: $(STAMP)
	$(PY) -m aiokprod perf --num-records 100000

# Apache Kafka (KRaft) in the foreground for manual runs; needs Java 17+ (and Maven once, to
# fetch the jars into ~/.cache/aiokprod). KAFKA_ARGS="--brokers 3" or "--secure" for more.
kafka: $(STAMP)
	$(PY) tools/kafka_broker.py $(KAFKA_ARGS)

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
	rm -rf $(VENV) .venv-* build site *.egg-info .mypy_cache .ruff_cache .pytest_cache \
		aiokprod/_native/*.so aiokprod/_native/*.c
