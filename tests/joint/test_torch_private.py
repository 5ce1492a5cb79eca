"""remat.joint's private torch names live in one adapter (remat/joint/torch_private.py), behind a
version check that refuses an untested torch in one line."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn

import remat
from remat.joint import torch_private
from remat.schedules import RematError

JOINT = Path(remat.__file__).resolve().parent / "joint"
ADAPTER = JOINT / "torch_private.py"


def _private(dotted: str) -> bool:
    """A torch path with a private part (``torch._inductor``, ``torch.utils._pytree``,
    ``torch.ops._c10d_functional``); aten's op names (``torch.ops.aten._unsafe_view``) are public."""
    parts = dotted.split(".")
    if parts[0] != "torch" or parts[:3] == ["torch", "ops", "aten"]:
        return False
    return any(p.startswith("_") and not p.startswith("__") for p in parts[1:])


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of an attribute chain rooted at a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def private_uses(source: str) -> list[str]:
    """Every private torch name the code (not its strings or comments) imports or reads."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            found += [
                f"{node.module}.{a.name}" for a in node.names if _private(f"{node.module}.{a.name}") or a.name[0] == "_"
            ]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(_dotted(node) or ""):
            found.append(_dotted(node))
    return found


def test_the_scan_finds_private_names_in_code_and_not_in_strings() -> None:
    code = (
        '"""torch._inductor in a docstring"""\n'
        "import torch._dynamo\n"
        "from torch._functorch import partitioners as tp\n"
        "from torch.fx._lazy_graph_module import _use_lazy_graph_module\n"
        "x = torch._guards.TracingContext\n"
        "y = torch.ops.aten._unsafe_view.default  # torch._ops in a comment\n"
    )
    assert private_uses(code) == [
        "torch._dynamo",
        "torch._functorch.partitioners",
        "torch.fx._lazy_graph_module._use_lazy_graph_module",
        "torch._guards.TracingContext",
        "torch._guards",
    ]


def test_every_private_torch_name_of_remat_joint_is_in_the_adapter() -> None:
    assert private_uses(ADAPTER.read_text()), "the adapter holds the private names"
    offenders = {
        path.name: uses
        for path in sorted(JOINT.glob("*.py"))
        if path != ADAPTER and (uses := private_uses(path.read_text()))
    }
    assert offenders == {}
    # and nothing in remat.joint patches torch with unittest.mock (the adapter replaces in place)
    assert not [p.name for p in JOINT.glob("*.py") if "unittest" in p.read_text()]


def test_the_adapter_hands_out_names_not_torch_modules() -> None:
    """A module handed out would let ``adapter_module._private`` in by the back door."""
    modules = [n for n in torch_private.__all__ if isinstance(getattr(torch_private, n), types.ModuleType)]
    assert modules == []
    assert sorted(torch_private.__all__) == sorted(set(torch_private.__all__))


def test_the_running_torch_is_a_tested_one() -> None:
    assert torch_private.torch_release(torch.__version__) in torch_private.TESTED_TORCH
    torch_private.check_torch()  # no refusal


@pytest.mark.parametrize("version", ["2.12.1+cpu", "2.14.0a0+git1234abc", "3.0.0", "nightly"])
def test_an_untested_torch_is_refused_in_one_line(monkeypatch, version: str) -> None:
    monkeypatch.delenv(torch_private.UNTESTED_OPT_IN, raising=False)
    monkeypatch.setattr(torch, "__version__", version)
    with pytest.raises(RematError) as error:
        remat.compile(nn.Linear(2, 2))
    message = str(error.value)
    assert "\n" not in message
    assert f"torch {version} is untested" in message and torch_private.TESTED_RANGE in message
    monkeypatch.setenv(torch_private.UNTESTED_OPT_IN, "1")  # the user's own risk: no refusal
    torch_private.check_torch()


def test_torch_release_reads_major_and_minor() -> None:
    assert torch_private.torch_release("2.13.0+cpu") == (2, 13)
    assert torch_private.torch_release("2.14.0a0+git1") == (2, 14)
    assert torch_private.torch_release("nightly") is None


@pytest.mark.slow
def test_an_untested_torch_refuses_before_any_private_import() -> None:
    """Imported on an untested torch, the adapter raises the one line before its private imports
    (which may not exist there) run."""
    code = (
        "import torch; torch.__version__ = '2.99.0'\n"
        "try:\n"
        "    import remat.joint.torch_private\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != torch_private.UNTESTED_OPT_IN}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.startswith("RematError remat.compile: torch 2.99.0 is untested"), out.stdout + out.stderr
