"""Each lesson's calibration, one module per lesson (or per group of lessons that train the same models), which
``benchmarks/calibrate.py`` drives. Every module has the same small interface:

- ``LESSONS``: the lessons it calibrates, as two-digit strings (``("01", "02", "03")``);
- ``EXPERIMENTS``: its experiments' names, unique over all modules, in the order its report shows them;
- ``SEEDS``: the seeds it runs when ``--seeds`` is not given (``ATTNEDU_SEED_OFFSET``: 0 is the lesson's own run,
  1000 and up the test command's perturbed run's);
- ``run(experiment, seed, **options) -> dict``: trains and measures one experiment at one seed, exactly as the
  lesson runs it (the lesson's package function with the lesson's recipe), in a process of its own that the driver
  started with ``ATTNEDU_SEED_OFFSET=seed`` and one torch thread; it returns a dict that JSON can hold, with the
  keys ``"model"`` (the experiment) and ``"seed"``;
- ``report(results, info) -> str``: the markdown tables of a list of ``run``'s dicts (``info``: the driver's
  ``common.RunInfo``: its command, seeds, processes and date).

A module whose lesson reads its margins from a record (``calibrationNN.json``) also has ``RECORD`` (the record's
file name in ``benchmarks/``), ``margins(runs) -> dict`` (the margins, from every run the record holds, by the rules
in ``MARGIN_RULES``) and ``RECIPE`` (the recipe the lesson checks the record against); ``--json`` writes the record
through ``common.write_record`` (every set of CPU kernels once). A module whose record has another, older format
that its lesson reads gives its own ``write_record(results, info, path) -> str``.
"""

# every module, in the order of the lessons
MODULES = (
    "lesson01_03",
    "lesson04",
    "lesson05",
    "lesson06",
    "lesson07",
    "lesson09",
    "lesson10",
    "lesson11",
    "lesson13",
)
