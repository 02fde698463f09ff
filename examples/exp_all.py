"""Run every experiment script (quick settings by default; ``--full`` for the papers' repetitions).

    python examples/exp_all.py --out build/experiments [--full | --tiny]

Each script writes its PNG figure and a markdown page into ``--out``; this
script then writes ``index.html`` there, one self-contained report page (no
scripts, no links off the machine) with every figure, its notes and its table.
Progress (a bar with rate and ETA on a terminal, plain lines otherwise) goes
to stderr.
"""

from __future__ import annotations

import datetime as _dt
import html
import importlib
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exp_common as ec

from smcdp.progress import task

SCRIPTS = [
    "exp_000_breast_cancer",
    "exp_003_synthetic",
    "exp_002_bayes_error",
    "exp_004_dpem",
    "exp_vs_diffprivlib",
    "exp_fig4_6_aggregate",
]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def main(argv=None) -> int:
    args = ec.parser(__doc__.splitlines()[0]).parse_args(argv)
    if args.full and args.tiny:
        print("give --full or --tiny, not both", file=sys.stderr)
        return 2
    # every experiment's optional packages, before the first one runs
    ec.require(dict.fromkeys(p for name in SCRIPTS for p in importlib.import_module(name).NEEDS), __file__)
    passthrough = (
        ["--out", args.out, "--seed", str(args.seed)]
        + (["--full"] if args.full else [])
        + (["--tiny"] if args.tiny else [])
    )
    seconds: dict[str, float] = {}
    with task("experiments", total=len(SCRIPTS), unit="experiment") as t:
        for name in SCRIPTS:
            print(f"== {name}", flush=True)
            t.update(description=f"experiments ({name})")
            t0 = time.monotonic()
            rc = importlib.import_module(name).main(passthrough)
            seconds[name] = time.monotonic() - t0
            if rc:
                return rc
            t.advance()
        t.update(description="experiments")
    index = write_index(Path(args.out), SCRIPTS, seconds, "full" if args.full else "tiny" if args.tiny else "quick")
    print(f"wrote {index}")
    return 0


# ------------------------------------------------------------------ the report page
def _inline(text: str) -> str:
    """Markdown inline code and emphasis of the experiment pages, HTML-escaped."""
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"(?<![\w*])_([^_]+)_(?![\w*])", r"<em>\1</em>", out)


def _page(md: str) -> tuple[str, list[str], list[list[str]], str | None, str]:
    """(title, paragraphs, table rows, image, footer) of a page written by exp_common.write_report."""
    title, paras, table, image, footer = "", [], [], None, ""
    for block in re.split(r"\n\s*\n", md.strip()):
        lines = block.strip().splitlines()
        if lines[0].startswith("# "):
            title = lines[0][2:].strip()
            lines = lines[1:]
        if not lines:
            continue
        if all(line.startswith("|") for line in lines):
            table = [
                [c.strip() for c in line.strip().strip("|").split("|")]
                for line in lines
                if not re.fullmatch(r"\|(\s*-+\s*\|)+", line.strip())
            ]
        elif m := re.fullmatch(r"!\[[^\]]*\]\(([^)]+)\)", block.strip()):
            image = m.group(1)
        elif block.strip().startswith("_Generated"):
            footer = block.strip().strip("_")
        else:
            paras.append(" ".join(lines))
    return title, paras, table, image, footer


def write_index(out: Path, scripts: list[str], seconds: dict[str, float], mode: str) -> Path:
    """``out/index.html``: every experiment's figure, notes and table; raises if a figure is missing."""
    sections, toc = [], []
    for name in scripts:
        pngs = sorted(out.glob(f"{name}*.png"))
        md_path = out / f"{name}.md"
        if not pngs or not md_path.is_file():
            raise FileNotFoundError(f"{name} wrote no figure or page in {out}")
        for png in pngs:
            if png.read_bytes()[:8] != PNG_MAGIC:
                raise ValueError(f"{png} is not a PNG file")
        title, paras, table, image, footer = _page(md_path.read_text(encoding="utf-8"))
        images = [image] if image else []
        images += [p.name for p in pngs if p.name not in images]
        toc.append(f'<li><a href="#{name}">{html.escape(title or name)}</a></li>')
        parts = [f'<section id="{name}"><h2>{html.escape(title or name)}</h2>']
        for img in images:
            parts.append(
                f'<figure><img src="{html.escape(img)}" alt="{html.escape(title or name)}">'
                f"<figcaption>{html.escape(img)}</figcaption></figure>"
            )
        parts += [f"<p>{_inline(p)}</p>" for p in paras]
        if table:
            head, *rows = table
            parts.append(
                "<table><thead><tr>"
                + "".join(f"<th>{_inline(c)}</th>" for c in head)
                + "</tr></thead><tbody>"
                + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows)
                + "</tbody></table>"
            )
        parts.append(
            f'<p class="meta">{_inline(footer)} Page: <a href="{md_path.name}">{md_path.name}</a>; '
            f"run here in {seconds.get(name, 0.0):.1f} s.</p></section>"
        )
        sections.append("\n".join(parts))
    stamp = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>smcdp: the seed papers' experiments</title>
<style>
body {{ font-family: sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }}
img {{ max-width: 100%; border: 1px solid #ddd; }}
table {{ border-collapse: collapse; font-size: 0.9rem; margin: 1rem 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.meta {{ color: #666; font-size: 0.85rem; }} section {{ margin-bottom: 3rem; }}
</style></head><body>
<h1>smcdp: the seed papers' experiments</h1>
<p class="meta">{len(scripts)} experiments, {html.escape(mode)} settings, written {stamp} by
<code>examples/exp_all.py</code> (<code>make experiments</code>; <code>FULL=1</code> for the papers' repetitions).</p>
<ol>{"".join(toc)}</ol>
{chr(10).join(sections)}
</body></html>
"""
    path = out / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


if __name__ == "__main__":
    raise SystemExit(main())
