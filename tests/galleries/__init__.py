"""The galleries of learner functions that tests/test_checks.py runs the checks against (being split into one
module per lesson)."""
