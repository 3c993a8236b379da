"""``rse-fast``: parse the command line, dispatch to the subcommand's module, and turn any
failure into one or two lines a person can act on."""

from __future__ import annotations

import argparse
import logging
import sys
from types import ModuleType

from rse_fast.cli import eval as eval_command
from rse_fast.cli import local, report, serve, solve

#: Subcommand name → its module (``add_parser(sub)``, ``run(args)``, optional ``check``).
COMMANDS: dict[str, ModuleType] = {
    "solve": solve,
    "local": local,
    "eval": eval_command,
    "serve": serve,
    "report": report,
}
DESCRIPTION = (
    "Test-time scaling for LLMs: `solve` a problem with RSE, `eval` methods at equal tokens, "
    "`serve` them behind an OpenAI-compatible API, run the embedded `local` llama-server."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rse-fast", description=DESCRIPTION)
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="what the library logs to stderr (default WARNING)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done, 1 a runtime failure (one or two lines on stderr saying what to do),
    2 a usage error, 130 interrupted. ``--debug`` shows tracebacks instead."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    command = COMMANDS[args.command]
    check = getattr(command, "check", None)
    if check is not None:
        check(args, parser)
    try:
        status: int = command.run(args)
        return status
    except KeyboardInterrupt:
        hint = "; rerun with --resume to continue" if getattr(args, "checkpoint", None) else ""
        print(f"\ninterrupted{hint}", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        from rse_fast.cli.errors import describe

        print(f"rse-fast {args.command}: {describe(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
