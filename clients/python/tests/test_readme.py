"""The README's Python example runs as written: the first ```python block
under `## Embed from Python` in the project's README.md, run by this
Python with `$EFFECTS_BIN` naming the binary under test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import unittest

from support import BIN, PROJECT


def readme_example() -> str:
    """The first ```python block of the `## Embed from Python` section."""
    text = (PROJECT / "README.md").read_text()
    start = text.index("\n## Embed from Python\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    found = re.search(r"^```python\n(.*?)^```$", section, re.S | re.M)
    if found is None:
        raise AssertionError("no ```python block under `## Embed from Python` in README.md")
    return found.group(1)


class ReadmeExample(unittest.TestCase):
    def test_the_example_runs_and_completes(self) -> None:
        example = readme_example()
        with tempfile.TemporaryDirectory(prefix="effect-ledger-readme-") as cwd:
            ran = subprocess.run(
                [sys.executable, "-c", example],
                cwd=cwd,
                env={**os.environ, "EFFECTS_BIN": BIN},
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        self.assertEqual(ran.returncode, 0, f"stdout:\n{ran.stdout}\nstderr:\n{ran.stderr}")
        self.assertEqual(ran.stdout.strip().splitlines()[-1], "COMPLETED", ran.stdout)


if __name__ == "__main__":
    unittest.main()
