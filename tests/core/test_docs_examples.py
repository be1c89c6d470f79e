"""The Python examples in the README and the extending guide run, in order, as written."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PAGES = ["README.md", "docs/extending.md"]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_run(page: str) -> None:
    blocks = python_blocks(ROOT / page)
    assert blocks, f"{page} has no python examples"
    namespace: dict[str, object] = {"__name__": f"docs_example_{Path(page).stem}"}
    for block in blocks:
        exec(compile(block, page, "exec"), namespace)
