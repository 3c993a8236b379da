"""``rse-fast report TRACE``: the report page of a run, rebuilt from its ``--trace`` file."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="write the report page of a run from its --trace file")
    p.add_argument("trace", help="JSONL written by `rse-fast solve --trace`")
    p.add_argument("--out", default="rse-fast-report.html", help="the HTML file to write")


def run(args: argparse.Namespace) -> int:
    from rse_fast.rse.run_page import result_from_trace, write_report

    with open(args.trace, encoding="utf-8") as fh:
        result = result_from_trace(fh, args.trace)
    print(f"report page: {write_report(result, args.out)}")
    return 0
