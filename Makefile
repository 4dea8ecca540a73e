# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: test demo kafka lint typecheck unit gen docs bench clean

# setup.py builds the native extension (aiokprod/_native) in place when a compiler exists
$(STAMP): pyproject.toml setup.py aiokprod/_native/_speedups.pyx
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# The suite runs twice: on the native path, then on the pure-Python one (what an install
# without a compiler runs).
test: $(STAMP)
	$(PY) tools/gen_protocol.py --check
	$(PY) tools/gen_config_docs.py --check
	$(VENV)/bin/ruff check aiokprod tests tools benchmarks examples setup.py
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q -p no:cacheprovider
	AIOKPROD_NO_EXTENSIONS=1 $(VENV)/bin/pytest -q -p no:cacheprovider

demo: $(STAMP)
	$(PY) -m aiokprod perf --num-records 100000

# Apache Kafka (KRaft) in the foreground for manual runs; needs Java 17+ (and Maven once, to
# fetch the jars into ~/.cache/aiokprod). KAFKA_ARGS="--brokers 3" or "--secure" for more.
kafka: $(STAMP)
	$(PY) tools/kafka_broker.py $(KAFKA_ARGS)

gen: $(STAMP)
	$(PY) tools/gen_protocol.py
	$(PY) tools/gen_config_docs.py

# The documentation site (mkdocs.yml) into site/; --strict: a broken link, a page left out of the
# nav or a docstring that does not render fails it. `$(VENV)/bin/mkdocs serve` previews it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build site *.egg-info .mypy_cache .ruff_cache .pytest_cache \
		aiokprod/_native/*.so aiokprod/_native/*.c
