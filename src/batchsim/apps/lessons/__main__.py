"""`python -m batchsim.apps.lessons [NAME...] [--jobs N]`, from the repository's root: rerun
the named lessons (all by default) and rewrite their figures and generated numbers."""

from __future__ import annotations

import argparse
from pathlib import Path

from batchsim.apps.lessons.build import build_lesson
from batchsim.apps.lessons.catalogue import LESSONS


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m batchsim.apps.lessons",
                                     description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"lessons to rebuild (default all: {', '.join(LESSONS)})")
    parser.add_argument("--jobs", type=int, default=1, help="simulations at once")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in LESSONS]
    if unknown:
        parser.error(f"no lesson named {', '.join(unknown)} (lessons: {', '.join(LESSONS)})")
    for name in args.names or list(LESSONS):
        for path in build_lesson(LESSONS[name], Path.cwd(), jobs=args.jobs):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
