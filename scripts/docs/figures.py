"""Refresh the committed figures of the documentation site (``make docs-figures``).

Every page's ``figures:`` front matter names a PNG and the example that writes it. For each,
this copies ``out/<file>`` when ``make demo`` left it there (``--from-out`` only: nothing
else), and otherwise runs that example's ``main(quick=True)`` into a scratch folder and
copies the PNG it wrote. Figures wider than ``--max-width`` pixels are scaled down (Pillow),
so ``docs/figures/`` stays small. ``make docs`` itself never runs an example.

  python scripts/docs/figures.py [--from-out] [--only NAME ...] [--out out]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import shutil
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

from scripts.docs import jaxkit_docs as D  # noqa: E402


def page_figures() -> list[dict]:
    """Every ``figures:`` entry of every page (areas, composing)."""
    import yaml

    out = []
    for page in sorted(D.DOCS.rglob("*.md")):
        text = page.read_text()
        if not text.startswith("---\n"):
            continue
        meta = yaml.safe_load(text.split("---\n", 2)[1]) or {}
        for fig in meta.get("figures") or []:
            out.append({**fig, "page": str(page.relative_to(ROOT))})
    return out


def _shrink(path: pathlib.Path, max_width: int) -> None:
    if path.suffix == ".svg":  # vector figures scale by themselves
        return
    from PIL import Image

    with Image.open(path) as im:
        if im.width <= max_width:
            return
        h = round(im.height * max_width / im.width)
        im.convert("RGB").resize((max_width, h), Image.LANCZOS).save(path, optimize=True)


def _run_example(name: str, out_dir: str) -> None:
    import jax

    jax.config.update("jax_num_cpu_devices", 8)  # as the tour (examples that build a mesh)
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"examples.{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(quick=True, seed=0, out_dir=out_dir)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out", help="where `make demo` writes (default out/)")
    p.add_argument("--from-out", action="store_true", help="only copy from --out, run nothing")
    p.add_argument("--only", nargs="*", default=None, help="figure files or example names")
    p.add_argument("--max-width", type=int, default=1000)
    args = p.parse_args()
    D.FIGURES_DIR.mkdir(parents=True, exist_ok=True)
    status = 0
    for fig in page_figures():
        name, example = fig["file"], fig.get("example", "")
        if args.only and name not in args.only and example not in args.only:
            continue
        src = ROOT / args.out / name
        dst = D.FIGURES_DIR / name
        if not src.is_file() and not args.from_out:
            if not (ROOT / "examples" / f"{example}.py").is_file():
                print(f"{name}: examples/{example}.py does not exist (yet); skipped")
                continue
            tmp = tempfile.mkdtemp(prefix="jaxkit-fig-")
            t0 = time.perf_counter()
            try:
                _run_example(example, tmp)
            except Exception as e:  # noqa: BLE001 (report and go on with the other figures)
                print(f"{name}: {example} failed: {e!r}")
                status = 1
                continue
            src = pathlib.Path(tmp) / name
            print(f"{name}: ran {example} (quick) in {time.perf_counter() - t0:.0f} s")
        if not src.is_file():
            print(f"{name}: not found ({src})")
            status = 1 if not args.from_out else status
            continue
        shutil.copyfile(src, dst)
        _shrink(dst, args.max_width)
        print(f"{name}: {dst.relative_to(ROOT)} ({dst.stat().st_size // 1024} KB)")
    return status


if __name__ == "__main__":
    sys.exit(main())
