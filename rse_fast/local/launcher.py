"""``python -m rse_fast.local.launcher``: llama.cpp's HTTP server from the prebuilt ``xllamacpp``
wheel, in a process of its own, taking the subset of ``llama-server`` flags that
:meth:`LocalServer.command` passes, so either server starts from the same command line.

It serves until SIGTERM or SIGINT, which end the process at once by the signal's default
action: the server's native threads may hold the interpreter while they generate, so a
Python-level handler could wait for a long queue to drain (it did, under load); the kernel
frees the model's memory and the listening socket."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

#: the flags LocalServer passes; anything else is refused so a typo is not silently ignored
FLAGS = ("-m", "--host", "--port", "-np", "-c", "-t")
SWITCHES = ("--jinja", "--no-webui")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rse_fast.local.launcher", allow_abbrev=False)
    p.add_argument("--site", help="folder holding the verified xllamacpp package")
    p.add_argument("-m", dest="model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("-np", dest="parallel", type=int, default=1)
    p.add_argument("-c", dest="ctx", type=int, default=4096)
    p.add_argument("-t", dest="threads", type=int, default=0)
    p.add_argument("--jinja", action="store_true")
    p.add_argument("--no-webui", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.site:
        sys.path.insert(0, args.site)
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.ctx
    if args.threads > 0:
        params.cpuparams.n_threads = args.threads
        params.cpuparams_batch.n_threads = args.threads
    params.use_jinja = args.jinja
    params.endpoint_metrics = True
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)  # the kernel ends the process: no GIL needed
    server = xllamacpp.Server(params)
    print(f"xllamacpp {xllamacpp.__version__} serving at {server.listening_address}", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    raise SystemExit(main())
