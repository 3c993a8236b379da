"""Encoder benchmark: rse_fast's Encoder vs a naive per-text loop and fastembed, same model file.

    python -m bench encoder --quick   # < 60 s

Short (~20 tokens), medium (~80) and mixed-length (5-128) texts; ours at one call per set (it
cuts the call into length-sorted sub-batches of ~512 tokens) and one call per text, the naive
loop, and fastembed at each batch size in FASTEMBED_BATCHES with the best one as its baseline;
every side embeds the same texts the same number of times, CPU, threads fixed to the machine's
cores for every contender; the result cache is off so every text is really embedded.
fastembed loads the same model.onnx and tokenizer.json from a local folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import best_time, write_result
from rse_fast.encoder import Encoder
from rse_fast.kernels import available_cores
from rse_fast.registry import resolve_encoder

WORDS = (
    "the a proof lemma answer equation root integer prime divisor function derivative limit "
    "triangle angle area circle radius probability expected value sum product sequence series "
    "check verify assume therefore hence because contradiction case base induction step "
    "pitfall mistake sign error boundary condition zero division negative positive fraction"
).split()


def make_texts(n: int, lo: int, hi: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(lo, hi + 1))) for _ in range(n)]


class NaiveLoop:
    """The obvious baseline: one tokenizer call and one session.run per text."""

    def __init__(self, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model = resolve_encoder()
        self.tok = Tokenizer.from_file(str(model.tokenizer_path))
        self.tok.no_padding()
        self.tok.enable_truncation(128)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        self.sess = ort.InferenceSession(
            str(model.onnx_path), opts, providers=["CPUExecutionProvider"]
        )

    def encode(self, texts: list[str]) -> np.ndarray:
        out = []
        for t in texts:
            ids = np.array([self.tok.encode(t).ids], np.int64)
            h = self.sess.run(
                None,
                {
                    "input_ids": ids,
                    "attention_mask": np.ones_like(ids),
                    "token_type_ids": np.zeros_like(ids),
                },
            )[0][0]
            v = h.mean(axis=0)
            out.append(v / np.linalg.norm(v))
        return np.array(out, np.float32)


def make_fastembed(threads: int) -> tuple[Any, str | None]:
    """fastembed's TextEmbedding on the same files, offline; (None, reason) if it cannot."""
    try:
        from fastembed import TextEmbedding
        from fastembed.common.model_description import ModelSource, PoolingType
    except ImportError as exc:
        return None, f"fastembed not installed ({exc})"
    model = resolve_encoder()
    folder = Path(tempfile.mkdtemp(prefix="fastembed-model-"))
    (folder / "model.onnx").symlink_to(model.onnx_path)
    (folder / "tokenizer.json").symlink_to(model.tokenizer_path)
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"model_max_length": 128, "do_lower_case": True})
    )
    name = "local/all-minilm-l6-v2-int8"
    try:
        TextEmbedding.add_custom_model(
            model=name,
            pooling=PoolingType.MEAN,
            normalization=True,
            sources=ModelSource(hf="local/none"),
            dim=384,
            model_file="model.onnx",
        )
        emb = TextEmbedding(
            model_name=name,
            specific_model_path=str(folder),
            threads=threads,
            providers=["CPUExecutionProvider"],
        )
    except Exception as exc:  # record why rather than fail the whole benchmark
        return None, f"fastembed could not load the local model: {exc!r}"
    return emb, None


#: fastembed is measured at each of these and the best is its baseline.
FASTEMBED_BATCHES = (1, 16, 64, 256)


def rate(fn, texts: list[str], tokens: int, repeat: int) -> dict[str, float]:
    fn(texts[:8])
    t = best_time(lambda: fn(texts), repeat=repeat)
    return {"sent_per_s": len(texts) / t, "tok_per_s": tokens / t, "seconds": t}


def cold_start() -> float:
    code = (
        "import time; t=time.perf_counter()\n"
        "from rse_fast.encoder import Encoder\n"
        "Encoder().encode(['first experience'])\n"
        "print(time.perf_counter()-t)\n"
    )
    runs = [
        float(subprocess.check_output([sys.executable, "-c", code], text=True).split()[-1])
        for _ in range(3)
    ]
    return min(runs)


#: all-MiniLM-L6-v2: layers, hidden size, feed-forward size.
LAYERS, HIDDEN, FFN = 6, 384, 1536


def gemm_flops_per_token() -> int:
    """Multiply-adds ×2 of the weight GEMMs per token (Q, K, V, output, two feed-forward);
    the attention products, which grow with length, are left out, so the rate is a floor."""
    return LAYERS * 2 * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * FFN)


def run(quick: bool) -> dict[str, Any]:
    threads = available_cores()
    ours = Encoder(providers=["CPUExecutionProvider"], threads=threads, cache_size=0)
    ours.warmup()
    naive = NaiveLoop(threads)
    fe, fe_reason = make_fastembed(threads)
    n = 64 if quick else 2048
    sets = {
        "short": make_texts(n, 12, 18, 1),
        "medium": make_texts(n, 60, 75, 2),
        "mixed": make_texts(n, 3, 120, 3),
    }
    results: dict[str, Any] = {}
    repeat = 2 if quick else 3  # every side, every set: the same texts, the same runs
    for name, texts in sets.items():
        tokens = ours.count_tokens(texts)
        row: dict[str, Any] = {"texts": len(texts), "tokens": tokens, "repeats": repeat}
        row["ours_b256"] = rate(ours.encode, texts, tokens, repeat)
        row["ours_b1"] = rate(lambda ts: [ours.encode([t]) for t in ts], texts, tokens, repeat)
        row["naive_loop"] = rate(naive.encode, texts, tokens, repeat)
        if fe is not None:
            for size in FASTEMBED_BATCHES:
                row[f"fastembed_b{size}"] = rate(
                    lambda ts, size=size: list(fe.embed(ts, batch_size=size)),
                    texts,
                    tokens,
                    repeat,
                )
            best = max(FASTEMBED_BATCHES, key=lambda b: row[f"fastembed_b{b}"]["sent_per_s"])
            row["fastembed_best_batch"] = best
            row["speedup_vs_fastembed_best"] = (
                row["ours_b256"]["sent_per_s"] / row[f"fastembed_b{best}"]["sent_per_s"]
            )
        row["speedup_vs_naive_loop"] = (
            row["ours_b256"]["sent_per_s"] / row["naive_loop"]["sent_per_s"]
        )
        results[name] = row
        print(
            f"{name}: ours {row['ours_b256']['sent_per_s']:.0f} sent/s, "
            f"naive {row['naive_loop']['sent_per_s']:.0f}, fastembed best "
            f"{row.get('speedup_vs_fastembed_best', float('nan')):.2f}x slower",
            flush=True,
        )
    if fe is not None:  # same model, same pooling: the vectors must agree
        texts = sets["mixed"][:32]
        agree = float(
            np.min(
                np.einsum(
                    "ij,ij->i", ours.encode(texts), np.array(list(fe.embed(texts)), np.float32)
                )
            )
        )
    else:
        agree = None
    mixed = results["mixed"]
    from bench.dedup import sgemm_gflops

    sgemm = sgemm_gflops()
    gflops = mixed["ours_b256"]["tok_per_s"] * gemm_flops_per_token() / 1e9
    return {
        "mode": "quick" if quick else "full",
        "provider": ours.provider,
        "threads": threads,
        "sent_per_s": mixed["ours_b256"]["sent_per_s"],
        "tok_per_s": mixed["ours_b256"]["tok_per_s"],
        "speedup_vs_naive_loop": mixed["speedup_vs_naive_loop"],
        "speedup_vs_fastembed_best": mixed.get("speedup_vs_fastembed_best"),
        "fastembed_best_batch": mixed.get("fastembed_best_batch"),
        "fastembed_reason": fe_reason,
        "min_cosine_vs_fastembed": agree,
        "cold_start_s": cold_start(),
        # ONNX Runtime folds the int8 weights' dequantisation into float initialisers when the
        # session loads, so the GEMMs run in float32: this CPU's sgemm is the limit
        "weights_run_as": "float32",
        "gemm_gflops": gflops,
        "sgemm_gflops": sgemm,
        "fraction_of_sgemm": gflops / sgemm,
        "sets": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    t0 = time.perf_counter()
    payload = run(args.quick)
    payload["wall_s"] = time.perf_counter() - t0
    path = write_result("encoder_quick" if args.quick else "encoder", payload)
    for k in (
        "sent_per_s",
        "speedup_vs_naive_loop",
        "speedup_vs_fastembed_best",
        "fastembed_reason",
        "min_cosine_vs_fastembed",
        "cold_start_s",
        "wall_s",
    ):
        print(f"{k}: {payload[k]}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
