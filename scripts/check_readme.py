"""Execute the README's Python snippets in order (CI runs this through tests/test_readme.py)."""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def snippets() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    for i, code in enumerate(snippets()):
        exec(compile(code, f"README.md snippet {i}", "exec"), {"__name__": "__readme__"})
    print(f"README: {len(snippets())} snippet(s) ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
