"""``python -m bench <name> [args]``: run one benchmark (its ``--help`` says what it takes)."""

from __future__ import annotations

import importlib
import sys

#: name -> what it measures (each module's ``main()`` runs it)
BENCHES = {
    "dedup": "the dedup kernel against NumPy, FAISS at its best, the naive loop and the machine",
    "dedup_scale": "the float16 bank against float32, NumPy and FAISS at N up to 5e6, a stream",
    "encoder": "the sentence encoder's throughput",
    "embed_text": "embedding the bank's statements, batch against streamed",
    "client": "the LLM client against the openai SDK on the scripted server",
    "overhead": "RSE's overhead on the critical path next to LLM latency",
    "serve": "the service against the upstream floor",
    "peers": "our methods side by side with its_hub's",
    "stopping": "the statistical stop's saving in the service",
    "distill_cache": "the prefix cache's share of distillation prompts (real llama-server)",
    "frontier": "accuracy against cost: confidence and stopping rules (real llama-server)",
    "rse_ablation": "RSE at equal tokens: dev and test cells (real llama-server)",
    "rse_grounded": "checked experience on code (real llama-server)",
    "repeatability": "the same seeded request alone and among others (real llama-server)",
    "eval_local": "the study's table on the local models (real llama-server)",
    "demo": "the README's main job, timed",
    "local_server": "prefill and decode of the prebuilt server against the source build",
    "device": "the encoder on CUDA and the kernel at N=1e6 (a GPU machine)",
    "queue": "the model runs in queue.toml's order, one at a time, each resumed",
    "summarize": "the README's tables and inline values, from the JSON results",
}


#: a bench whose module has another name: ``queue`` would shadow the standard library's for
#: every worker started as a script from bench/
MODULES = {"queue": "model_queue"}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in BENCHES:
        width = max(map(len, BENCHES))
        print("usage: python -m bench <name> [args]\n")
        print("\n".join(f"  {n:<{width}}  {what}" for n, what in BENCHES.items()))
        raise SystemExit(0 if len(sys.argv) < 2 else 2)
    name = sys.argv[1]
    sys.argv = [f"python -m bench {name}", *sys.argv[2:]]
    importlib.import_module(f"bench.{MODULES.get(name, name)}").main()


if __name__ == "__main__":
    main()
