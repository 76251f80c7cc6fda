"""The documentation site: every area has a page, every public name is documented.

Default tier (no build): each ``jaxkit._SUBPACKAGES`` entry has ``docs/areas/<area>.md``
following the template (``docs/README.md``); the API reference the hook generates lists
every public name of every area (``__all__``, or the names an ``__init__.py`` re-exports);
each documented object has a non-empty docstring as griffe (the site's reader) sees it.

Slow tier: ``mkdocs build --strict`` into a scratch folder, the site served on localhost,
the index and an area page loaded in headless Chromium (``--dump-dom`` and
``--screenshot``, saved to ``out/docs/``): the rendered DOM has the page title, the API
entries and the figure, every documented name is in ``objects.inv``, and the server's access
log has no 404 for an image or a stylesheet. Skips, saying why, without Chromium or mkdocs.
"""

import functools
import http.server
import importlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import zlib

import pytest

import jaxkit
from scripts.docs import jaxkit_docs as D

ROOT = pathlib.Path(__file__).resolve().parent.parent
AREAS = jaxkit._SUBPACKAGES
DIRECTIVES = ("figures", "bench", "methods", "api")


def test_subpackages_read_without_import_equal_runtime():
    assert D.subpackages() == tuple(jaxkit._SUBPACKAGES)


@pytest.mark.parametrize("area", AREAS)
def test_every_area_has_a_page_from_the_template(area):
    page = D.area_page(area)
    assert page.is_file(), f"docs/areas/{area}.md missing: copy the template in docs/README.md"
    text = page.read_text()
    front = text.split("---\n", 2)[1] if text.startswith("---\n") else ""
    assert re.search(rf"^area: {re.escape(area)}$", front, re.M), f"{page}: front matter area"
    for d in DIRECTIVES:
        assert text.count(f"<!-- jaxkit:{d} -->") == 1, f"{page}: needs one <!-- jaxkit:{d} -->"
    body = text.split("---\n", 2)[2]
    assert "**When to use it.**" in body, f"{page}: the 'When to use it' paragraph"


def test_no_page_without_an_area():
    pages = {p.stem for p in D.AREAS_DIR.glob("*.md")}
    assert pages <= set(AREAS), f"pages for no area: {sorted(pages - set(AREAS))}"


@pytest.mark.parametrize("area", AREAS)
def test_every_public_name_is_in_the_api_reference(area):
    md = D.api_markdown(area)
    blocks = set(re.findall(r"^::: (\S+)$", md, re.M))
    documented = D.documented_paths(area)
    for mod in D.public_modules(area):
        runtime = importlib.import_module(mod)
        names = [n.name for n in D.public_names(mod) if not n.is_module]
        if hasattr(runtime, "__all__"):  # the source reading agrees with the runtime __all__
            assert [n.name for n in D.public_names(mod)] == list(runtime.__all__), mod
        for name in names:
            assert hasattr(runtime, name), f"{mod}.{name} is listed but does not exist"
            path = f"{mod}.{name}"
            assert documented.get(path) in blocks, f"{path} is not in the API reference"
            # the documented path is the same object (a re-export documented once)
            target = documented[path]
            tmod, _, tname = target.rpartition(".")
            assert getattr(importlib.import_module(tmod), tname) is getattr(runtime, name), path


@functools.cache
def _griffe_package():
    griffe = pytest.importorskip("griffe", reason="griffelib is in the `test` extra")
    ext = griffe.load_extensions(str(ROOT / "scripts/docs/griffe_runtime_functions.py"))
    return griffe.load(
        "jaxkit", search_paths=[str(ROOT)], resolve_aliases=True, resolve_external=False,
        extensions=ext,
    )  # fmt: skip


def _undocumented(pkg, area: str, root: pathlib.Path = ROOT) -> list[str]:
    missing = []
    for s in D.api_sections(area, root):
        for path in s.entries:
            obj = pkg[path.removeprefix("jaxkit.")]
            obj = obj.final_target if obj.is_alias else obj
            if not (obj.docstring and obj.docstring.value.strip()):
                missing.append(f"{path} ({obj.filepath.relative_to(root)}:{obj.lineno})")
    return missing


@pytest.mark.parametrize("area", AREAS)
def test_every_documented_object_has_a_docstring(area):
    missing = _undocumented(_griffe_package(), area)
    assert not missing, "no docstring: " + ", ".join(missing)


def test_the_checks_catch_a_missing_page_name_and_docstring(tmp_path):
    """The checks can fail: a fake area whose re-export has no docstring is caught."""
    pkg = tmp_path / "jaxkit" / "fake"
    pkg.mkdir(parents=True)
    (tmp_path / "jaxkit" / "__init__.py").write_text('_SUBPACKAGES = ("fake",)\n')
    (pkg / "__init__.py").write_text(
        '"""Fake."""\nfrom jaxkit.fake._impl import f as f\nfrom jaxkit.fake._impl import g\n'
    )
    (pkg / "_impl.py").write_text('def f():\n    pass\n\n\ndef g():\n    """G."""\n')
    assert D.subpackages(tmp_path) == ("fake",)
    # g is imported for internal use (no redundant alias): not public
    assert [n.name for n in D.public_names("jaxkit.fake", tmp_path)] == ["f"]
    assert "::: jaxkit.fake.f" in D.api_markdown("fake", tmp_path)
    griffe = pytest.importorskip("griffe", reason="griffelib is in the `test` extra")
    fake = griffe.load(tmp_path / "jaxkit", resolve_aliases=True)
    assert _undocumented(fake, "fake", tmp_path) == ["jaxkit.fake.f (jaxkit/fake/_impl.py:1)"]


def _readme_table_lines() -> tuple[list[str], list[str]]:
    body = D.readme_sections().get("Methods", "").splitlines()
    start = next(i for i, ln in enumerate(body) if ln.startswith("|"))
    end = next((i for i in range(start, len(body)) if not body[i].startswith("|")), len(body))
    return body[start], body[start + 2 : end]


def test_readme_method_rows_have_every_cell():
    """Every method row splits into the header's cells, for the docs pages and on GitHub,
    where a `|` inside a code span still ends the cell (write it out or escape it, `\\|`)."""
    header, rows = D.readme_method_table()
    assert header[0] == "method" and len(rows) > 10
    assert not [r[0] for r in rows if len(r) != len(header)], "rows the docs pages would drop"
    head, lines = _readme_table_lines()
    bars = len(re.findall(r"(?<!\\)\|", head))
    github = [ln[:60] for ln in lines if len(re.findall(r"(?<!\\)\|", ln)) != bars]
    assert not github, f"rows GitHub splits into the wrong number of cells: {github}"


def _slugs(heading: str) -> tuple[str, str]:
    """The id of a heading on the site (Python-Markdown's toc) and on GitHub."""
    import unicodedata

    site = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    site = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", site).strip().lower())
    github = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
    return site, github


def test_readme_links_into_the_docs_resolve():
    """The README's links into docs/ (a row's `[history](docs/areas/<area>.md#...)`) name a
    page that exists and a heading of it whose id is the same on the site and on GitHub."""
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(docs/([^)#\s]+)(?:#([^)\s]*))?\)", text)
    bad = []
    for path, anchor in links:
        page = ROOT / "docs" / path
        if not page.is_file():
            bad.append(f"docs/{path}: no such page")
            continue
        heads = re.findall(r"^#{1,6} (.+?)\s*$", page.read_text(), re.M)
        if anchor and not any(_slugs(h) == (anchor, anchor) for h in heads):
            bad.append(f"docs/{path}#{anchor}: no heading with that id on both")
    assert not bad, bad


def test_readme_links_are_made_relative_to_the_page():
    md = "see [history](docs/areas/data.md#mts-history) and [x](docs/index.md)"
    assert (
        D.readme_links(md, "areas/data.md")
        == "see [history](data.md#mts-history) and [x](../index.md)"
    )
    assert (
        D.readme_links(md, "index.md")
        == "see [history](areas/data.md#mts-history) and [x](index.md)"
    )
    assert _slugs("MDLM and TD3B history") == ("mdlm-and-td3b-history",) * 2


# ----------------------------------------------------------------------------- slow: the site


class _Handler(http.server.SimpleHTTPRequestHandler):
    log: list[tuple[str, int]] = []

    def log_request(self, code="-", size="-"):
        type(self).log.append((self.path, int(code) if str(code).isdigit() else 0))

    def log_message(self, *args):
        pass


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _browse(exe: str, url: str, shot: pathlib.Path) -> str:
    common = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    common += ["--virtual-time-budget=5000", "--window-size=1280,1600"]
    subprocess.run([*common, f"--screenshot={shot}", url], capture_output=True, timeout=120)
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    return dom.stdout


def _fresh_site(tmp_path: pathlib.Path) -> pathlib.Path:
    """``site/`` when ``make docs`` built it after every source changed (as in ``.ci/run``),
    else a strict build into ``tmp_path``."""
    site = ROOT / "site"
    sources = [ROOT / "mkdocs.yml", ROOT / "README.md"]
    for d in ("docs", "jaxkit", "scripts/docs", "benchmarks"):
        sources += [
            p for p in (ROOT / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ]
    if (site / "objects.inv").is_file():
        built = (site / "objects.inv").stat().st_mtime
        if all(p.stat().st_mtime < built for p in sources):
            return site
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    return site


def _inventory(path: pathlib.Path) -> set[str]:
    raw = path.read_bytes()
    body = raw.split(b"\n", 4)[4]  # four header lines, then zlib
    return {ln.split(" ", 1)[0] for ln in zlib.decompress(body).decode().splitlines()}


@pytest.mark.slow
def test_site_renders_in_chromium(tmp_path):
    exe = _chromium()
    if exe is None:
        pytest.skip("no Chromium found: `apt-get install chromium` (Debian) to run this check")
    pytest.importorskip("mkdocs", reason="the `docs` extra is not installed: run `make docs`")
    site = _fresh_site(tmp_path)
    # every documented object is in the site's inventory (mkdocstrings wrote its anchor)
    inv = _inventory(site / "objects.inv")
    want = {p for a in AREAS for s in D.api_sections(a) for p in s.entries}
    assert want <= inv, f"not in objects.inv: {sorted(want - inv)[:20]}"

    handler = functools.partial(_Handler, directory=str(site))
    _Handler.log = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    out = ROOT / "out" / "docs"
    out.mkdir(parents=True, exist_ok=True)
    try:
        index = _browse(exe, f"{base}/", out / "index.png")
        area = "privacy"
        page = _browse(exe, f"{base}/areas/{area}/", out / f"{area}.png")
    finally:
        server.shutdown()
        server.server_close()

    assert "<title>Getting started - jaxkit</title>" in index, index[:2000]
    assert "Design principles" in index and f'href="areas/{area}/"' in index
    assert f"<title>jaxkit.{area} - jaxkit</title>" in page
    for path in (p for s in D.api_sections(area) for p in s.entries):
        assert f'id="{path}"' in page, f"API entry {path} not rendered"
    assert re.search(r'<img[^>]+src="\.\./\.\./figures/prism_digits\.png"', page), "no figure"
    assert (out / "index.png").stat().st_size > 10_000 and (out / f"{area}.png").is_file()

    fetched = dict(_Handler.log)
    assets = [p for p in fetched if re.search(r"\.(png|svg|jpe?g|gif|css)(\?|$)", p)]
    assert any(p.endswith(".css") for p in assets) and any("prism_digits.png" in p for p in assets)
    bad = [(p, c) for p, c in _Handler.log if c == 404]
    assert not bad, f"404 for {bad}"
