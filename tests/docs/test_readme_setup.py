"""The README's two set-up lines install what CI (.ci/run) installs: the same pinned torch, and
torchvision/timm without their dependencies (so the CPU torch is not replaced)."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def _setup_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "README.md: no bash block with the set-up commands"
    return [line for line in block[1].splitlines() if line.strip()]


def _pins(text: str) -> set[str]:
    return set(re.findall(r"\b(torch(?:vision)?|timm)==([\w.]+)", text))


def test_the_readme_starts_with_the_two_setup_commands():
    install, tests = _setup_lines()
    assert "pip install torch==" in install and "remat solve examples/" in install
    assert "python -m pytest -q" in tests


def test_ci_runs_exactly_the_readme_test_command():
    """.ci/run's last line is the README's test command (with the derandomized hypothesis profile)."""
    _, tests = _setup_lines()
    command = tests.split("&&")[-1].strip()
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci[-1] == f"REMAT_HYPOTHESIS=ci {command}", (ci[-1], command)


def test_the_readme_installs_every_pin_that_ci_installs_the_same_way():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = "\n".join(_setup_lines())
    assert _pins(ci) and _pins(ci) <= _pins(readme), (_pins(ci), _pins(readme))
    no_deps = [line for line in ci.splitlines() if "--no-deps" in line]
    for package in ("torchvision", "timm"):
        assert any(package in line for line in no_deps)
        assert re.search(rf"--no-deps[^\n&]*\b{package}==", readme), f"README installs {package} with its deps"
