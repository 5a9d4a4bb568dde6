# Two commands do everything on a fresh machine with Python 3.11+ (tools/check_python.py refuses an older one):
#   make lab    set up the learner install, then open the course in JupyterLab at lesson 01
#   make test   set up the contributor install, then run the whole test suite (what CI runs)
# and for learners: make check [LESSON=04]   run your own exercise notebooks in work/ and see where you stand
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
READY  := $(VENV)/.ready
DEV_READY := $(VENV)/.ready-dev
INSTRUCTOR_READY := $(VENV)/.ready-instructor
# Every install is held to the exact versions in constraints.txt (regenerate with `make lock`).
PIP    := $(BIN)/python -m pip install --quiet -c constraints.txt
# torch goes in first, so that nothing else can pull a build of its own: a wheel already on this
# machine if pip finds one without an index (its dependencies then come with requirements.txt),
# else the CPU build. On Linux that is PyTorch's CPU index, because PyPI's Linux torch is the CUDA
# build (several GB); on macOS PyPI's torch is the CPU build.
TORCH       := torch==2.13.0
TORCH_INDEX := $(if $(filter Linux,$(shell uname -s)),--index-url https://download.pytorch.org/whl/cpu)
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg
# The perturbed run moves every trained model's seeds by this much (see attnedu/runtime.py), and computes with
# another path through torch's CPU kernels: ATen's baseline kernels and MKL's compatible code path. On any x86-64 CPU
# with AVX2 or AVX-512 their results differ in the last bits from the native kernels' (matrix products, the GRU and
# the softmax alike), as another machine's would; the trained effects are calibrated on this path too
# (benchmarks/calibration_default.md: lessons 01-07 so far). On a CPU with neither (Apple's, for one) these may be
# the kernels it runs anyway: there the seeds still move.
PERTURBATION := 1000
OTHER_KERNELS := MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default
# Extra options for `make lab`, passed to JupyterLab, e.g. make lab ARGS="--no-browser --port=8890"
ARGS ?=
# `make check LESSON=04` checks only work/04_*.ipynb
LESSON ?=

.PHONY: lab check instructor nbgrader-course hub test notebooks book lock cuda gpu-bench clean

# The learner install: the lessons, the exercises, `make check` and the grader (requirements.txt).
$(READY): requirements.txt requirements-nodeps.txt constraints.txt pyproject.toml
	@$(PYTHON) tools/check_python.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) --no-index --no-deps $(TORCH) 2>/dev/null || $(PIP) $(TORCH) $(TORCH_INDEX)
	$(PIP) -r requirements.txt
	$(PIP) --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -c "import matplotlib.pyplot"  # build the font cache now, not in a notebook
	touch $(READY)

# The instructor install: the learner install plus nbgrader and JupyterHub (requirements-instructor.txt).
$(INSTRUCTOR_READY): $(READY) requirements-instructor.txt
	$(PIP) -r requirements-instructor.txt
	touch $(INSTRUCTOR_READY)

instructor: $(INSTRUCTOR_READY)

# An nbgrader course directory made from solutions/, in nbgrader_course/ (git-ignored): one assignment per exercise
# notebook, the student versions released, the gradebook, and the config under which autograde runs each submission
# in the course grader's sandbox (docs/instructors.md, "Grading with nbgrader"). Run nbgrader from that folder.
nbgrader-course: $(INSTRUCTOR_READY)
	$(BIN)/python -m attnedu.grading.nbgrader_course nbgrader_course

# The class hub's proxy: configurable-http-proxy from npm, pinned by hub/package-lock.json, in hub/node_modules.
HUB_PROXY := hub/node_modules/.installed
$(HUB_PROXY): hub/package.json hub/package-lock.json
	cd hub && npm ci
	touch $(HUB_PROXY)

# JupyterHub for a class on this machine, as root (jupyterhub_config.py; docs/instructors.md, "A class on one
# server"): the system users in the group attnedu log in with their password, each gets a server of their own with the
# course read-only and a private work/. Stop it with Ctrl+C. Options to JupyterHub: make hub ARGS="--port=8443 ..."
hub: $(INSTRUCTOR_READY) $(HUB_PROXY)
	@[ "$$(id -u)" = 0 ] || { echo "make hub: run it as root (JupyterHub starts each learner's server as them)" >&2; exit 2; }
	$(BIN)/jupyterhub -f jupyterhub_config.py $(ARGS)

# The contributor install: the instructor install plus the book, the test tools and Playwright (requirements-dev.txt).
$(DEV_READY): $(READY) requirements-dev.txt requirements-instructor.txt
	$(PIP) -r requirements-dev.txt
	touch $(DEV_READY)

# Copies each exercise notebook into work/ (git-ignored, the learner's own: an existing copy is never
# overwritten), then serves JupyterLab from the repository root with lesson 01 open. Stop it with Ctrl+C twice.
lab: $(READY)
	$(BIN)/python tools/lab.py $(ARGS)

# Run the learner's own notebooks in work/ (all, or LESSON=04's) under nbval (lax: a cell that raises fails),
# then a summary per exercise: passed, failed with the diagnosis, or not attempted.
check: $(READY)
	@$(BIN)/python tools/check.py $(LESSON)

# 1. ruff; 2. unit tests, two at a time, and beside them lax nbval over the generated exercises (no stored outputs:
#    they must run without error); 3. strict nbval over the lessons and solutions (stored outputs must match), one
#    notebook at a time, as a learner runs them: the benchmark table it prints judges each notebook's own time
#    against the budget (lessons train models on every core, see attnedu.runtime);
# 4. the perturbed run: lessons and solutions again, strict, with every trained model's seeds moved and other CPU
#    kernels (OTHER_KERNELS), standing in for another machine (compared outputs must still match, asserted effects
#    still hold).
# ATTNEDU_PROGRESS=0: progress bars change from run to run, and nbval compares outputs.
test: $(DEV_READY) $(if $(shell command -v npm),$(HUB_PROXY))
	$(BIN)/ruff check .
	ATTNEDU_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist loadscope --nbval-lax --nbval-current-env tests exercises
	ATTNEDU_PROGRESS=0 $(BIN)/python -m pytest $(NBVAL) notebooks solutions
	ATTNEDU_PROGRESS=0 ATTNEDU_SEED_OFFSET=$(PERTURBATION) $(OTHER_KERNELS) $(BIN)/python -m pytest -n 2 --dist loadscope \
		$(NBVAL) notebooks solutions

# Re-run every lesson and solution top to bottom in a fresh kernel, store the outputs,
# and regenerate exercises/ from solutions/.
notebooks: $(DEV_READY)
	ATTNEDU_PROGRESS=0 $(BIN)/python tools/run_notebooks.py notebooks/*.ipynb solutions/*.ipynb
	$(BIN)/python -m attnedu.build_exercises

# The static site, from the stored outputs: book/_build/html/index.html
book: $(DEV_READY)
	$(BIN)/jupyter-book build -W --keep-going book/

# Pin every package the contributor install pulls in (requirements-dev.txt, which includes the learner's
# requirements.txt), from a throwaway environment (after editing either file). Both installs use these pins.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --no-index --no-deps $(TORCH) 2>/dev/null || \
		.venv-lock/bin/python -m pip install --quiet $(TORCH) $(TORCH_INDEX)
	.venv-lock/bin/python -m pip install --quiet -r requirements-dev.txt
	.venv-lock/bin/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
	{ echo "# Exact versions of everything requirements.txt and requirements-dev.txt install; made by \`make lock\`, used by every install."; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable | sed -e 's/+cpu$$//'; } > constraints.txt
	rm -rf .venv-lock

# Swap the CPU build of torch in .venv for PyPI's CUDA build of the same version (Linux with an NVIDIA GPU).
cuda: $(READY)
	$(BIN)/python -m pip uninstall --quiet -y torch
	$(BIN)/python -m pip install --quiet $(TORCH) --index-url https://pypi.org/simple

# After `make cuda`, on a machine with an NVIDIA GPU (see benchmarks/gpu_bench.md): the GPU suite (the Triton kernels
# against SDPA's cuDNN and flash backends and naive attention, bfloat16, forward and forward+backward, N 1k..16k,
# head_dim 64 and 128, causal and not, 20 interleaved timed calls per method and shape) run twice back to back, the two
# runs compared (fails where a median moved by more than 3%), and the suite's autotuned forward configurations timed
# alone by benchmarks/tune_triton.py (fails above 3% from the suite) -> benchmarks/attention_cuda.{json,md,png},
# attention_cuda_repeat.*, attention_cuda_compare.md, triton_tuning_check.txt. About 4-5 minutes on an H100 (the
# estimate in gpu_bench.md). It refuses to run without a CUDA GPU; `python -m attnedu.bench --gpu-suite --dry-run`
# runs the same pipeline on the CPU with stand-ins.
GPU_SUITE_RUN = $(BIN)/python -m attnedu.bench --gpu-suite --time-limit 300
gpu-bench: $(READY)
	$(GPU_SUITE_RUN) --out benchmarks/attention_cuda
	$(GPU_SUITE_RUN) --out benchmarks/attention_cuda_repeat
	$(BIN)/python -m attnedu.bench --compare benchmarks/attention_cuda.json benchmarks/attention_cuda_repeat.json \
		> benchmarks/attention_cuda_compare.md; repeat=$$?; \
	$(BIN)/python benchmarks/tune_triton.py --against benchmarks/attention_cuda.json --lengths 4096 16384 \
		> benchmarks/triton_tuning_check.txt; tuning=$$?; \
	cat benchmarks/attention_cuda_compare.md benchmarks/triton_tuning_check.txt; \
	echo "repeatable within 3%: $$([ $$repeat = 0 ] && echo yes || echo NO); tuning script within 3% of the suite: \
	$$([ $$tuning = 0 ] && echo yes || echo NO)"; [ $$repeat = 0 ] && [ $$tuning = 0 ]

clean:
	rm -rf $(VENV) book/_build .pytest_cache
