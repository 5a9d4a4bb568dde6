"""attnedu.triton_inspect.kernel_source: the lines of a kernel the lessons print (08a, 08b), read from the file,
equal to what inspect reads from the jitted function, and refused when a marker is gone (the kernel changed)."""

from __future__ import annotations

import importlib.util
import inspect
import textwrap

import pytest

from attnedu.triton_inspect import kernel_source


def test_kernel_source_cuts_where_asked_and_numbers_the_lines():
    whole = kernel_source("_load")
    header, body = whole.split("\n", 1)
    assert body.startswith("def _load(") and body.rstrip().endswith("return x")
    first, last = (int(x) for x in header.rsplit("lines ", 1)[1].split("-"))
    assert last - first + 1 == len(body.splitlines())
    until = kernel_source("_load", "if CHECK_ROWS:", until="else:").split("\n", 1)[1]
    through = kernel_source("_load", "if CHECK_ROWS:", through="else:").split("\n", 1)[1]
    assert until.splitlines()[0] == "if CHECK_ROWS:" and "else:" not in until
    assert through.splitlines()[:-1] == until.splitlines() and through.splitlines()[-1].strip() == "else:"


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_kernel_source_is_what_runs():
    import attnedu._triton_kernels as kernels

    for name in ("_load", "_forward_tiles", "attention_forward_kernel", "_dkdv_tiles", "_dq_tiles"):
        jitted = inspect.getsource(getattr(kernels, name).fn)
        body = textwrap.dedent(jitted[jitted.index("def ") :]).rstrip()
        assert kernel_source(name).split("\n", 1)[1] == body, name


def test_kernel_source_refuses_what_is_not_there():
    with pytest.raises(ValueError, match="no function"):
        kernel_source("no_such_kernel")
    with pytest.raises(ValueError, match="has the kernel changed"):
        kernel_source("_load", "a line no kernel has")
    with pytest.raises(ValueError, match="has the kernel changed"):
        kernel_source("_load", "if CHECK_ROWS:", until="a line no kernel has")
    with pytest.raises(ValueError, match="not both"):
        kernel_source("_load", until="else:", through="else:")
