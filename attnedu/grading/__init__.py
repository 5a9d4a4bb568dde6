"""Batch grading of exercise notebooks, each submission in its own sandbox.

    python -m attnedu.grade SUBMISSIONS --out scores.csv [--jobs N] [--timeout S] [--time-limit S]
                            [--feedback full|diagnosis|score]

One module per part (none imports torch or the notebook machinery on ``import attnedu.grading``):

    cli       the command line: checks its input, chooses the sandbox, hashes the originals, writes reports
    grader    per submission: scan, work folder, sandbox, compare with the references, clean up
    sandbox   the bubblewrap command: a minimal read-only root, one writable folder, new namespaces
    users     run as root: the block of sandbox users this run claims for itself (a lock), and its leftovers
    worker    runs inside the sandbox: the notebook's cells, then each function's calls, under deadlines
    kernel    runs inside the learner's kernel: calls one function on the grader's inputs (in a forked child),
              saves the outputs
    results   reads what came back as untrusted data, and checks it with attnedu.checks.diagnosis.run_check
    scan      reads the notebook's code for forgeries (patched checks, hooks, the reference implementation)
    reports   scores.csv, summary.md/.csv, feedback/<submission>.md (at the --feedback level), scores.png

Trust: only the grader's own process is trusted. The learner's kernel and the worker beside it
send back data (JSON; tensors loaded with ``weights_only=True``); the grader computes the
references and decides every mark.
"""
