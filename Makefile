# The two commands a newcomer needs: `make demo` and `make test`. Each installs first when needed.
# The distribution's Python 3.11 first, when it can make a venv: Debian builds it with profile-guided
# optimisation and LTO, which pyenv and a plain source build leave out. Whole suite on 2 cores,
# alternating runs, 3 Dec: Debian's 3.11.2 251 and 260 s (411 and 422 CPU-s), pyenv's 3.11.7 275
# and 268 s (461 and 445 CPU-s). Any other interpreter: `make clean; make PYTHON=/path/to/python install`.
PYTHON ?= $(shell for p in /usr/bin/python3.11 python3.11 python3; do \
	$$p -c 'import ensurepip' 2>/dev/null && command -v $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV_VERSION := 0.13.8
PYTEST_ARGS ?=

.PHONY: install system-tools demo test test-chaos-real test-two-engines check bench lock clean ablation view-screenshot vendor-htmx

install: system-tools $(STAMP)

# The isolating sandboxes' tools (docs/sandboxes.md), nginx, the peer `bench proxy --peers nginx`
# measures (docs/benchmarks.md), PostgreSQL's server binaries, which the tests of the ledger on
# PostgreSQL start on a temporary directory (docs/ledger.md), and Debian's chromium, the browser the
# tests of `wedgewatch view` drive with Playwright (docs/view.md; Playwright's own browser download
# is not used): installed with apt-get when root on Debian, else one line saying what to install.
# The local sandbox, the bench without peers and the view itself need none of them.
system-tools:
	@missing=""; for t in bwrap podman runc nginx chromium; do command -v $$t >/dev/null || [ -x /usr/sbin/$$t ] || missing="$$missing $$t"; done; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing bubblewrap podman runc nginx postgresql chromium (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap podman runc nginx postgresql chromium >/dev/null; \
	  else \
	    echo "sandboxes bwrap/container, bench proxy --peers nginx, the PostgreSQL ledger's tests and the view's browser tests need:$$missing (Debian: sudo apt-get install bubblewrap podman runc nginx postgresql chromium)"; \
	  fi; \
	fi

# Re-installs only when the lock or the project file changed since the last install.
# Bytecode is compiled here, once: uv does not compile by default, and with PYTHONDONTWRITEBYTECODE
# set (as on this machine kind) every simulator, CLI run and sandboxed pytest would compile
# aiohttp, pydantic, openai and pytest from source again (a fresh clone's first `make demo`: 96 s without, 63 s with).
$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || test -n "$(PYTHON)" || { echo "make install: no Python 3.11 that can make a venv (Debian: sudo apt-get install python3.11-venv; or make PYTHON=/path/to/python3.11 install)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	$(BIN)/python -m compileall -q src
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/wedgewatch demo

# The suite starts hundreds of interpreters (simulators, CLI runs, pytest inside sandboxes). The
# install compiled the packages; with PYTHONDONTWRITEBYTECODE set in the caller's environment each
# interpreter would still compile wedgewatch modules edited since then, and the test modules, from
# source again. Bytecode goes to the usual, git-ignored __pycache__ directories; sandboxes still
# write none into a repository.
# --dist loadgroup: tests marked with one xdist_group (a llama.cpp server, the Ray cluster, the
# default demo) run on one worker, so each is started once, not once per worker (tests/conftest.py).
# -n 6 on 2 cores: many tests wait (on a simulated deadline, a restart, a subprocess) while others
# compute; the CPU stays near 100% busy until the last minute, and more workers fill that minute
# with the tests that wait. Each worker collects the whole suite (about 1.2 CPU-s), so more is not
# free. Whole suite on 2 cores, Debian's Python, alternating pairs on two days: -n 4 237.0, 237.9,
# 252.3, 241.9 s; -n 6 232.0, 232.0, 238.0, 236.1 s (earlier, -n 3 281 s, -n 5 241-256 s).
# The same machine differs by day: on 4 Dec the suite of 3 Dec ran 238.8-256.5 s (232 s the day
# before). After that day's test changes (CHANGELOG), 4 Dec, fresh clones: 236.6 and 220.3 s
# (after make check, as CI runs it), 229.9 s rerun, 233.9 and 221.5 s right after the install
# (about 17 s, before the suite: 3 min 58.7 s for the whole first `make test` of a new clone).
# The real-vLLM tests (tests/test_vllm_*.py) need vLLM's own environment and the bundled model as
# safetensors, both cached outside the repository (src/wedgewatch/launchers/vllm_env.py): made here
# before the suite, once per machine (a few minutes; nothing when cached), outside any test's timeout.
# --durations=15: every run ends with its slowest 15 tests, so a slow one is seen where it lands.
# -m "not bench and not two_engines": the tests marked `bench` need a quiet machine (test-chaos-real
# below); those marked two_engines start two real engines at once (test-two-engines below).
test: system-tools $(STAMP)
	$(BIN)/python -m wedgewatch.launchers.vllm provision
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n 6 --dist loadgroup --durations=15 -m "not bench and not two_engines" $(PYTEST_ARGS)

# bench chaos's short schedule on the real llama.cpp (tests/test_chaos_real.py, about a minute on
# an idle machine). Not in `test`: at a test's 2 s heartbeat window a starved llama.cpp is judged
# wedged (beside two `yes > /dev/null`, its fault-free control had 18 false wedges in 6 minutes).
test-chaos-real: $(STAMP)
	$(BIN)/python -m pytest -m bench --durations=5 tests/test_chaos_real.py

# The tests marked two_engines (tests/test_vllm_standby.py: a real vLLM with a spare life beside it):
# two engine starts at once, a promotion and the next spare's start, minutes of wall time on 2 cores,
# more than the suite's 6 minutes allow; run here, one engine pair for all of them.
test-two-engines: system-tools $(STAMP)
	$(BIN)/python -m wedgewatch.launchers.vllm provision
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -m two_engines --durations=15 $(PYTEST_ARGS)

check: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/lint-imports

# The 2^(4-1) ablation of the story's procedure, run for real on the simulator over 3 seeds, and
# whether the analysis recovers the scenario's ground truth (docs/analysis.md). Slow: not in `test`.
ablation: $(STAMP)
	$(BIN)/python -m wedgewatch.analysis.plan.ablation --seeds 3

bench: $(STAMP)
	$(BIN)/wedgewatch bench proxy
	$(BIN)/wedgewatch bench runner
	$(BIN)/wedgewatch bench llamacpp
	$(BIN)/wedgewatch bench vllm
	$(BIN)/wedgewatch bench detection
	$(BIN)/wedgewatch bench faults
	$(BIN)/wedgewatch bench resume --engine sim --engine vllm-cpu
	$(BIN)/wedgewatch bench resume --scale 3000
	$(BIN)/wedgewatch bench scale
	$(BIN)/wedgewatch bench chaos --engine sim --faults 20 --seed 1 --seed 2 --seed 3
	$(BIN)/wedgewatch bench chaos --engine vllm-cpu --faults 20 --seed 1 --seed 2 --seed 3
	$(BIN)/wedgewatch bench chaos --engine llamacpp --faults 20 --seed 1 --seed 2 --seed 3

# docs/view.md's screenshots, from the view's browser tests (tests/test_view_browser.py): the tests
# leave their pages' screenshots in a directory they are given, and this copies them into docs/;
# the tests themselves never write there.
view-screenshot: system-tools $(STAMP)
	rm -rf .view-shots && mkdir -p .view-shots
	WEDGEWATCH_VIEW_SHOTS=$(CURDIR)/.view-shots $(BIN)/python -m pytest -p no:cacheprovider -q tests/test_view_browser.py
	cp .view-shots/view-serve.png .view-shots/view-run.png docs/
	rm -rf .view-shots

# htmx and its SSE extension, as the view serves them (src/wedgewatch/view/static/NOTICE.md): fetched
# again from npm's registry at the pinned versions (npm checks each tarball's integrity hash) and
# compared with the vendored files. Needs npm; nothing else uses it.
HTMX_VERSION := 2.0.11
HTMX_SSE_VERSION := 2.2.4
vendor-htmx:
	@tmp=$$(mktemp -d) && cd $$tmp && npm pack -q htmx.org@$(HTMX_VERSION) htmx-ext-sse@$(HTMX_SSE_VERSION) >/dev/null && \
	mkdir a b && tar xzf htmx.org-$(HTMX_VERSION).tgz -C a && tar xzf htmx-ext-sse-$(HTMX_SSE_VERSION).tgz -C b && \
	cp a/package/dist/htmx.min.js b/package/dist/sse.min.js $(CURDIR)/src/wedgewatch/view/static/ && \
	cp a/package/LICENSE $(CURDIR)/src/wedgewatch/view/static/LICENSE.htmx.txt && \
	cp b/package/LICENSE $(CURDIR)/src/wedgewatch/view/static/LICENSE.htmx-ext-sse.txt && \
	cd $(CURDIR)/src/wedgewatch/view/static && rm -rf $$tmp && \
	grep -E '^    [0-9a-f]{64}  ' NOTICE.md | sed 's/^    //' | sha256sum -c -

# Regenerates the one lock from pyproject.toml, every extra included (needs network to PyPI).
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra all --extra dev --python-version 3.11 -o requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
