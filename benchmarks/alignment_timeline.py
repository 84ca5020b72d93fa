"""When did a head become an aligner? The AER tables a run trained with `align_gold` wrote at
each checkpoint (`RUN/probes/step_N/alignment.json`), as a markdown table and as the figure the
explorer's Training timeline draws (each head of one cross-attention layer, and the best reading).

    .venv/bin/python benchmarks/alignment_timeline.py runs/multi30k-en-fr
    .venv/bin/python benchmarks/alignment_timeline.py runs/multi30k-en-fr --layer 2 --png docs/aer_timeline_enfr.png

`--png` renders that figure (`viz.timeline_curve`) in Debian's Chromium, offline, and saves a
screenshot of it: the docs show exactly what the explorer shows.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from attnlab import viz
from attnlab.app.checkpoints import alignment_snapshots
from attnlab.errors import AttnlabError

CHROMIUM = "/usr/bin/chromium"


def table(tables: dict[int, dict], layer: int) -> tuple[list[str], dict[str, list[float]]]:
    """Markdown lines (step, best reading and its AER, each head of `layer`) and the curves (%)."""
    steps = list(tables)
    aers = [{row["reading"]: 100 * row["aer"] for row in t["rows"]} for t in tables.values()]
    heads = sorted(r["head"] for r in tables[steps[-1]]["rows"] if r["method"] == "head" and r["layer"] == layer)
    curves = {f"head {h}": [a[f"head L{layer} H{h}"] for a in aers] for h in heads}
    curves["best reading"] = [min(a.values()) for a in aers]
    lines = [
        "| step | best reading | AER | " + " | ".join(f"L{layer} H{h}" for h in heads) + " |",
        "|---:|---|---:|" + "---:|" * len(heads),
    ]
    for step, t, a in zip(steps, tables.values(), aers, strict=True):
        best = t["rows"][0]
        cells = " | ".join(f"{a[f'head L{layer} H{h}']:.1f}" for h in heads)
        lines.append(f"| {step:,} | {best['reading']} | {100 * best['aer']:.1f} | {cells} |")
    return lines, curves


def screenshot(figure: object, path: Path) -> None:
    """The figure as a standalone page in headless Chromium (network refused), saved as a PNG."""
    from playwright.sync_api import sync_playwright  # optional: only --png needs a browser

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        page_file = Path(tmp) / "timeline.html"
        page_file.write_text(viz.standalone_html(figure, title="AER timeline"), encoding="utf-8")
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        page = browser.new_page(viewport={"width": 640, "height": 320})
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
        page.goto(page_file.as_uri())
        page.locator("canvas").first.wait_for()
        page.wait_for_timeout(500)
        page.locator(".bk-Figure, .bk-root, body").first.screenshot(path=str(path))
        browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run directory (or a checkpoint that ships its probes)")
    parser.add_argument("--layer", type=int, help="cross-attention layer whose heads to show (default: the best's)")
    parser.add_argument("--png", help="also save the figure here (needs Chromium)")
    args = parser.parse_args(argv)
    tables = alignment_snapshots(args.run)
    if not tables:
        raise AttnlabError(f"{args.run}: no probes/step_N/alignment.json (train with --align-gold SET)")
    last = list(tables.values())[-1]
    layer = args.layer if args.layer is not None else next(r["layer"] for r in last["rows"] if r["layer"] is not None)
    lines, curves = table(tables, layer)
    print(f"AER % on the first {last['pairs']} pairs of {last['set']}, argmax links; cross-attention layer {layer}")
    print("\n".join(lines))
    if args.png:
        stat = f"AER %, cross layer {layer}"
        screenshot(viz.timeline_curve(list(tables), curves, stat=stat), Path(args.png))
        print(f"figure: {args.png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AttnlabError as error:
        sys.exit(f"alignment_timeline: {error}")
