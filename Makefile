# bayou: two commands set up a fresh machine.
#   make run   - create .venv, install bayou, start one broker (data in ./data)
#   make test  - install the dev dependencies (incl. PySpark), the Iggy SDKs, ZooKeeper (Debian
#                package, for the cluster tests) and promtool (Debian's prometheus package, to lint
#                /metrics), Chromium and its driver (Debian's packages, for the console's browser
#                tests), kcat (Debian's package, for the Kafka front end's tests), then run the
#                whole suite
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
STAMP   = $(VENV)/.installed
DEVSTAMP = $(VENV)/.installed-dev

# The published Iggy Python SDKs the end-to-end tests drive (tests/support/iggy_sdk.py). Both
# versions are the package apache-iggy (import apache_iggy), so each gets a venv of its own; the
# stamp names the pinned version, so changing a pin reinstalls.
IGGY08_VERSION = 0.8.0
IGGY09_VERSION = 0.9.0
IGGY08 = .venv-iggy08
IGGY09 = .venv-iggy09
IGGY08STAMP = $(IGGY08)/.installed-apache-iggy-$(IGGY08_VERSION)
IGGY09STAMP = $(IGGY09)/.installed-apache-iggy-$(IGGY09_VERSION)

# The cluster tests run a real Apache ZooKeeper: Debian's package (its jars in /usr/share/java).
ZOOKEEPER_JAR = /usr/share/java/zookeeper.jar
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test install dev iggy-sdks zookeeper promtool chromium kcat lint typecheck bench bench-iggy bench-sdk bench-spark bench-peers bench-instructions pipeline spark-package clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet -e .
	touch $@

$(DEVSTAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[dev]'
	touch $@ $(STAMP)

$(IGGY08)/bin/python:
	$(PYTHON) -m venv $(IGGY08)

$(IGGY08STAMP): | $(IGGY08)/bin/python
	$(IGGY08)/bin/python -m pip install --quiet apache-iggy==$(IGGY08_VERSION)
	touch $@

$(IGGY09)/bin/python:
	$(PYTHON) -m venv $(IGGY09)

$(IGGY09STAMP): | $(IGGY09)/bin/python
	$(IGGY09)/bin/python -m pip install --quiet apache-iggy==$(IGGY09_VERSION)
	touch $@

$(ZOOKEEPER_JAR):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q zookeeper \
	  || ($(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q zookeeper)
	test -f $@

zookeeper: $(ZOOKEEPER_JAR)

# promtool lints /metrics (tests/integration/test_http_metrics.py): Debian's prometheus package,
# without starting its server (RUNLEVEL=1). Not fatal: the test skips, saying why, without it.
PROMTOOL = /usr/bin/promtool

$(PROMTOOL):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends prometheus \
	  || ($(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
	      apt-get install -y -q --no-install-recommends prometheus) \
	  || echo "promtool could not be installed: the promtool check of /metrics is skipped"

promtool: $(PROMTOOL)

# The console's browser tests (tests/browser/) drive Debian's Chromium through chromium-driver with
# selenium. Not fatal: those tests skip, saying why, without them.
CHROMEDRIVER = /usr/bin/chromedriver

$(CHROMEDRIVER):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver \
	  || ($(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -q chromium chromium-driver) \
	  || echo "chromium could not be installed: the console's browser tests are skipped"

chromium: $(CHROMEDRIVER)

# kcat (Debian's package) drives the Kafka front end in tests/integration/test_kafka_clients.py. Not
# fatal: those tests skip, saying why, without it.
KCAT = /usr/bin/kcat

$(KCAT):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat \
	  || ($(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat) \
	  || echo "kcat could not be installed: the kcat tests of the Kafka front end are skipped"

kcat: $(KCAT)

install: $(STAMP)

dev: $(DEVSTAMP)

iggy-sdks: $(IGGY08STAMP) $(IGGY09STAMP)

run: $(STAMP)
	$(VENV)/bin/bayou serve --data-dir ./data

test: $(DEVSTAMP) $(IGGY08STAMP) $(IGGY09STAMP) $(ZOOKEEPER_JAR) $(PROMTOOL) $(CHROMEDRIVER) $(KCAT)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q

lint: $(DEVSTAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples

bench: $(STAMP)
	$(PY) benchmarks/storage_bench.py

bench-iggy: $(STAMP) $(IGGY08STAMP) $(IGGY09STAMP)
	$(PY) benchmarks/iggy_bench.py

# Redis and NATS from Debian, for benchmarks/peers.py (started on free ports, stopped by PID)
PEERS = /usr/bin/redis-server /usr/sbin/nats-server

$(PEERS):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends redis-server nats-server \
	  || ($(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	      RUNLEVEL=1 apt-get install -y -q --no-install-recommends redis-server nats-server)

bench-peers: $(DEVSTAMP) $(PEERS)
	$(PY) benchmarks/peers.py

# valgrind from Debian, for benchmarks/request_instructions.py (instructions per request: a figure
# that does not move with the machine's load, unlike the wall-clock ones)
VALGRIND = /usr/bin/valgrind

$(VALGRIND):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends valgrind \
	  || ($(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -q --no-install-recommends valgrind)

bench-instructions: $(STAMP) $(VALGRIND)
	$(PY) benchmarks/request_instructions.py

bench-sdk: $(STAMP)
	$(PY) benchmarks/sdk_bench.py

bench-spark: $(DEVSTAMP)
	$(PY) benchmarks/spark_bench.py

# The reference pipeline (examples/pipeline.py): starts its own broker unless BOOTSTRAP is set.
pipeline: $(DEVSTAMP)
	$(PY) examples/pipeline.py $(PIPELINE_ARGS)

# bayou as a zip for spark-submit --py-files (README: Spark, "Run on a cluster").
spark-package: $(DEVSTAMP)
	$(PY) -m bayou.spark.package dist/bayou.zip

clean:
	rm -rf $(VENV) $(IGGY08) $(IGGY09) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
