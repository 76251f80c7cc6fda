"""mkdocs hook: the nav from ``jaxkit._SUBPACKAGES`` and the pages' ``<!-- jaxkit:... -->``
directives (see ``docs/README.md`` for the page template).

Directives (HTML comments, so a page reads cleanly on GitHub too):

* ``<!-- jaxkit:api -->``: the area's API reference, one mkdocstrings block per public object
  (``scripts/docs/jaxkit_docs.py`` says what is public); required on every area page.
* ``<!-- jaxkit:bench -->``: the tables of the saved runs ``benchmarks/<name>.jsonl`` for the
  names in the page's ``bench:`` front matter (default: the area), rendered by
  ``scripts/bench/report.py`` as in ``BENCHMARKS.md``.
* ``<!-- jaxkit:methods -->``: the README method-table rows of the area (exact /
  reconstructed, paper, example, measured figures).
* ``<!-- jaxkit:figures -->``: the page's ``figures:`` from ``docs/figures/`` (a note where a
  figure has not been generated yet).
* ``<!-- jaxkit:readme "Title" -->``: a README section's body (``optional`` after the title:
  a note instead of a failure while the section does not exist yet).
* ``<!-- jaxkit:example "name" -->``: the docstring of ``examples/<name>.py`` (a note while
  the file does not exist yet).
* ``<!-- jaxkit:areas -->``: the table of areas (index page).
"""

from __future__ import annotations

import ast
import pathlib
import re
import shlex
import sys

from mkdocs.exceptions import PluginError

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.docs import jaxkit_docs as D  # noqa: E402

DIRECTIVE = re.compile(r"<!-- jaxkit:(?P<name>[a-z]+)(?P<args>[^>]*?) -->")


def _note(kind: str, title: str, text: str) -> str:
    return f'!!! {kind} "{title}"\n\n    ' + text.replace("\n", "\n    ") + "\n"


def on_config(config, **kwargs):
    """Nav from ``_SUBPACKAGES``; fail when an area has no page or a page has no area."""
    areas = D.subpackages()
    missing = [a for a in areas if not D.area_page(a).is_file()]
    extra = sorted(p.stem for p in D.AREAS_DIR.glob("*.md") if p.stem not in areas)
    if missing or extra:
        raise PluginError(
            f"docs/areas/ must hold one page per jaxkit._SUBPACKAGES entry: missing {missing}, "
            f"not an area {extra} (template: docs/README.md)"
        )
    config["nav"] = [
        {"Getting started": "index.md"},
        {"Areas": [{f"jaxkit.{a}": f"areas/{a}.md"} for a in areas]},
        {"Composing methods": "composing.md"},
    ]
    return config


def _figures(meta: dict, page_dir: pathlib.Path) -> str:
    figs = meta.get("figures") or []
    if not figs:
        return meta.get("figure_note", "This area's example writes no figure.")
    out = []
    for fig in figs:
        f = D.FIGURES_DIR / fig["file"]
        caption = fig.get("caption", "")
        if f.is_file():
            rel = pathlib.Path("..") / "figures" / fig["file"] if page_dir.name else None
            src = rel.as_posix() if rel else f"figures/{fig['file']}"
            out += [f"![{caption}]({src})", "", f"*{caption}* (`{fig['file']}`)", ""]
        else:
            out.append(
                _note(
                    "note",
                    "Figure not generated yet",
                    f"`{fig['file']}` is written by `{fig.get('example', 'its example')}`: "
                    "run `make docs-figures` (quick modes) and rebuild.",
                )
            )
    return "\n".join(out)


def _example_doc(name: str) -> str:
    path = ROOT / "examples" / f"{name}.py"
    if not path.is_file():
        return _note(
            "note",
            f"examples/{name}.py has not landed yet",
            "This part of the page fills itself in once the example exists.",
        )
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return f"From `examples/{name}.py`:\n\n" + "\n".join(
        "> " + ln if ln else ">" for ln in doc.splitlines()
    )


def _areas_table() -> str:
    out = ["| area | what it holds |", "|---|---|"]
    for a in D.subpackages():
        out.append(f"| [`jaxkit.{a}`](areas/{a}.md) | {D.module_summary(f'jaxkit.{a}')} |")
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files, **kwargs):
    """Expand the ``<!-- jaxkit:... -->`` directives of one page."""
    src = page.file.src_uri
    meta = page.meta or {}
    area = meta.get("area")
    page_dir = pathlib.PurePosixPath(src).parent
    if src.startswith("areas/"):
        if area != pathlib.PurePosixPath(src).stem:
            raise PluginError(f"{src}: front matter `area:` must be {pathlib.Path(src).stem!r}")
        if markdown.count("<!-- jaxkit:api -->") != 1:
            raise PluginError(f"{src}: an area page needs exactly one <!-- jaxkit:api -->")

    def expand(m: re.Match) -> str:
        name, args = m.group("name"), shlex.split(m.group("args"))
        if name == "api":
            return D.api_markdown(area)
        if name == "bench":
            names = meta.get("bench", [area])
            text = D.bench_markdown(names) if names else ""
            note = meta.get("bench_note", "")
            if not text:
                return note or "No saved bench runs for this area."
            return text + ("\n\n" + note if note else "")
        if name == "methods":
            return D.readme_links(D.methods_markdown(area, meta.get("readme_rows", [])), src)
        if name == "figures":
            return _figures(meta, pathlib.Path(str(page_dir)))
        if name == "readme":
            title, optional = args[0], "optional" in args[1:]
            sections = D.readme_sections()
            # exact title, else the first section whose title starts with it
            found = sections.get(title) or next(
                (v for k, v in sections.items() if k.startswith(title)), None
            )
            if found is not None:
                return D.readme_links(found, src)
            if optional:
                return _note(
                    "note",
                    f"README section “{title}” not there yet",
                    "This page includes that README section as soon as it exists.",
                )
            raise PluginError(f"{src}: README.md has no section {title!r}")
        if name == "example":
            return _example_doc(args[0])
        if name == "areas":
            return _areas_table()
        raise PluginError(f"{src}: unknown directive jaxkit:{name}")

    return DIRECTIVE.sub(expand, markdown)
