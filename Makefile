# Two commands do everything on a fresh machine with Python 3.10+:
#   make lab    set up, then open the course in JupyterLab at lesson 01
#   make test   set up, then run the whole test suite (what CI runs)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
READY  := $(VENV)/.ready

.PHONY: lab test notebooks book clean

$(READY): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -c "import matplotlib.pyplot"  # build the font cache now, not in a notebook
	touch $(READY)

lab: $(READY)
	$(BIN)/jupyter lab notebooks/01_rnn_bottleneck.ipynb

# Unit tests, then strict nbval over the lessons and solutions (stored outputs must match),
# then lax nbval over the generated exercises (no stored outputs: they must run without error).
# ATTNEDU_PROGRESS=0: progress bars change from run to run, and nbval compares outputs.
test: $(READY)
	$(BIN)/ruff check .
	ATTNEDU_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist loadscope \
		--nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
		tests notebooks solutions
	ATTNEDU_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist loadscope --nbval-lax --nbval-current-env exercises

# Re-run every lesson and solution top to bottom in a fresh kernel, store the outputs,
# and regenerate exercises/ from solutions/.
notebooks: $(READY)
	ATTNEDU_PROGRESS=0 $(BIN)/python tools/run_notebooks.py notebooks/*.ipynb solutions/*.ipynb
	$(BIN)/python -m attnedu.build_exercises

# The static site, from the stored outputs: book/_build/html/index.html
book: $(READY)
	$(BIN)/jupyter-book build -W --keep-going book/

clean:
	rm -rf $(VENV) book/_build .pytest_cache
