"""Where models come from (remat/models/loading.py): specs, shapes and the one dtype table that the
CLI's --dtype and graph profiling's dtype= both read."""

from __future__ import annotations

import pytest
import torch

from remat.graph.arguments import parse_dtype as graph_dtype
from remat.models.loading import FLOAT_DTYPES, parse_dtype, parse_shape
from remat.schedules import ProfileError, RematError


@pytest.mark.parametrize(
    ("name", "dtype"),
    [("float32", torch.float32), ("fp32", torch.float32), ("fp16", torch.float16), ("half", torch.float16),
     ("bf16", torch.bfloat16), ("bfloat16", torch.bfloat16), ("torch.float64", torch.float64),
     ("BF16", torch.bfloat16)],
)  # fmt: skip
def test_the_cli_and_graph_profiling_read_one_dtype_table(name, dtype):
    assert parse_dtype(name) is dtype
    assert graph_dtype(name) is dtype


def test_every_name_of_the_table_parses_in_both_places():
    for name, dtype in FLOAT_DTYPES.items():
        assert parse_dtype(name) is dtype and graph_dtype(name) is dtype


def test_an_unknown_dtype_is_one_line_naming_the_known_ones():
    with pytest.raises(RematError, match=r"--dtype: unknown dtype 'fp8' \(use one of .*bf16.*\)"):
        parse_dtype("fp8")
    with pytest.raises(ProfileError, match=r"dtype: unknown dtype 'fp8'"):
        graph_dtype("fp8")


def test_shapes_parse_and_bad_ones_are_refused():
    assert parse_shape("8,3,32,32") == (8, 3, 32, 32)
    with pytest.raises(RematError):
        parse_shape("8,-3")
