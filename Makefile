# fp8lab: `make run` runs every notebook headless; `make test` runs the tests.
# Both install fp8lab first (idempotent): into .venv by default, or, with VENV= (empty),
# into the Python environment that `python3` belongs to (a GPU box's own torch env).

comma    := ,
PYTHON   ?= python3
VENV     ?= .venv
# A GPU box gets torch + triton; a CPU-only machine never pulls a CUDA build of torch.
EXTRAS   ?= $(shell if nvidia-smi -L >/dev/null 2>&1; then echo gpu,test; else echo cpu,test; fi)
# Offline GPU box: `make run WHEELHOUSE=wheelhouse EXTRAS=gpu-tools,test VENV=` installs
# from the wheelhouse into the box's own Python (which has torch and triton), no network.
WHEELHOUSE ?=
# (its peers/ folder, from scripts/peers_offline.py, serves EXTRAS=...,peers)
PIP_SRC  := $(if $(WHEELHOUSE),--no-index --find-links $(WHEELHOUSE) $(if $(wildcard $(WHEELHOUSE)/peers),--find-links $(WHEELHOUSE)/peers,) --no-build-isolation,)
ARGS     ?=
# `make run` first builds every CUDA extension and cubin in parallel (`python -m fp8lab build`,
# which does nothing without a GPU); PREBUILD=no leaves each to the first notebook that needs it.
PREBUILD ?= yes

ifeq ($(strip $(VENV)),)
PY       := $(PYTHON)
STAMP    := .fp8lab-installed-$(subst $(comma),_,$(EXTRAS))
MKENV    := true
else
PY       := $(VENV)/bin/python
STAMP    := $(VENV)/.installed-$(subst $(comma),_,$(EXTRAS))
MKENV    := $(PYTHON) -m venv --system-site-packages $(VENV)
endif

.PHONY: run build test verify smoke test-gpu setup lab claims gallery sync wheelhouse clean-venv

$(STAMP): pyproject.toml
	$(MKENV)
	$(PY) -m pip install -q $(PIP_SRC) -e ".[$(EXTRAS)]"
	$(if $(findstring gpu,$(EXTRAS)),$(PY) -m pip install -q $(PIP_SRC) --no-deps "nvidia-cutlass>=3.9",)
	touch $@

setup: $(STAMP)

## Every notebook headless (measure with a GPU, redraw from data/ without), then the ledger.
## The runner gets make's clock readings (start, installed, prebuilt) for run.json's wall-time
## record (python -m fp8lab walltimes record runs/<run>).
run:
	@t0=$$(date +%s.%N); fresh=$$([ -f $(STAMP) ] && echo 0 || echo 1); \
	$(MAKE) --no-print-directory setup && t1=$$(date +%s.%N) && \
	summary=$$(mktemp -t fp8lab-build.XXXXXX.json) && \
	$(if $(filter yes,$(PREBUILD)),$(PY) -m fp8lab build --summary $$summary &&,) t2=$$(date +%s.%N) && \
	FP8LAB_MAKE_TIMES="$$t0 $$t1 $$t2" FP8LAB_MAKE_FRESH_INSTALL=$$fresh FP8LAB_BUILD_SUMMARY=$$summary \
	$(PY) -m fp8lab run $(ARGS) && \
	$(PY) -m fp8lab claims && $(PY) -m fp8lab gallery; rc=$$?; rm -f $$summary; exit $$rc

## Every CUDA extension and cubin the GPU notebooks use, built in parallel (BUILD_ARGS: --jobs N, --only ...).
BUILD_ARGS ?=
build: setup
	$(PY) -m fp8lab build $(BUILD_ARGS)

## The test suite (GPU tests skip without a GPU).
test: setup
	$(PY) -m pytest -q $(ARGS)

## Every table in data/ against its sidecar, the commit it names and that commit's sources (CI runs it).
verify: setup
	$(PY) -m fp8lab verify

## The GPU smoke: every notebook measures with its smallest sweep, into runs/ only.
smoke: setup
	$(if $(filter yes,$(PREBUILD)),$(PY) -m fp8lab build --smoke)
	$(PY) -m fp8lab run --smoke $(ARGS)

## The GPU tests (they need an NVIDIA GPU; without one pytest selects none and says so), and the
## tests that need torch but no GPU (CI has no torch: they run here, where torch is).
test-gpu: setup
	$(if $(filter yes,$(PREBUILD)),$(PY) -m fp8lab build --no-ahead)
	$(PY) -m pytest -q -m "gpu or torch" --durations=8 $(ARGS)

## Open the notebooks in JupyterLab: rooted at notebooks/, with a kernel that runs this venv's
## Python, and a paired .py opening as a notebook (fp8lab/run/lab.py says why). ARGS go to jupyter lab.
lab: setup
	$(PY) -m fp8lab lab $(ARGS)

## Regenerate the README's claims ledger from data/.
claims: setup
	$(PY) -m fp8lab claims

## Regenerate figures/README.md, the gallery, from figures/ and data/.
gallery: setup
	$(PY) -m fp8lab gallery

## Re-pair notebooks after editing either side (.py percent <-> .ipynb).
sync: setup
	$(PY) -m jupytext --sync notebooks/[0-9]*.py

## Wheels for an offline GPU box: everything the notebooks need beyond torch and triton.
## make wheelhouse WHEEL_PY=3.12 WHEEL_PLATFORM=manylinux_2_28_x86_64 [WHEEL_HAVE=box-freeze.txt]
WHEEL_PY       ?= 3.12
WHEEL_PLATFORM ?= manylinux_2_28_x86_64
WHEELHOUSE_DIR ?= wheelhouse
WHEEL_HAVE     ?=
wheelhouse:
	$(PYTHON) scripts/wheelhouse.py --python-version $(WHEEL_PY) --platform $(WHEEL_PLATFORM) \
		--dest $(WHEELHOUSE_DIR) $(if $(WHEEL_HAVE),--have $(WHEEL_HAVE),)

clean-venv:
	rm -rf $(VENV) .fp8lab-installed-*
