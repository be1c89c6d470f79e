"""What the rendered preview costs the job page: ``bot.review.preview.render`` (parse, render
block by block with links and images inert, nh3 on every block) on the largest page it
renders (``MAX_PREVIEW_BYTES`` of prose) and on a page of 10,000 links, beside the floor: the
same markdown-it-py parser rendering the whole page at once, unsanitised.

    python -m bench.preview_bench [--runs 5]

Median and slowest of ``--runs`` renders each. Nothing is asserted; the target is the
largest page in under a second on the 2-core development VM.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

from bot.review.links import parser
from bot.review.preview import MAX_PREVIEW_BYTES, render

PARAGRAPH = "Words with *emphasis*, `code` and [a link](x.md). " * 4 + "\n\n"


def pages() -> dict[str, str]:
    links = "".join(
        f"[link {i}](page-{i}.md) " + ("\n" if i % 10 == 9 else "") for i in range(10_000)
    )
    return {
        f"largest ({MAX_PREVIEW_BYTES // 1024} KiB of prose)": PARAGRAPH
        * (MAX_PREVIEW_BYTES // len(PARAGRAPH)),
        "10,000 links": links,
    }


def timed(runs: int, work: Callable[[], object]) -> tuple[float, float]:
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), max(seconds)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--runs", type=int, default=5)
    options = arguments.parse_args(argv)
    plain = parser()
    print(f"{'page':32} {'bytes':>9} {'preview median/max':>20} {'plain render (floor)':>22}")
    for name, text in pages().items():
        median, slowest = timed(options.runs, lambda text=text: render(text))
        floor, _ = timed(options.runs, lambda text=text: plain.render(text))
        print(
            f"{name:32} {len(text.encode()):>9,} {median:>9.3f} s/{slowest:.3f} s "
            f"{floor:>18.3f} s   {median / floor:.1f}x the floor"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
