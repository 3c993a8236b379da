"""Regenerate tests/data/encoder_reference.json: reference vectors computed the slow, obvious
way (one session.run per text, no padding, float64 pooling), independent of Encoder's batching.

    python tests/data/make_encoder_reference.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from rse_fast.registry import resolve_encoder

TEXTS = [
    "The derivative of x squared is two x.",
    "Check that the denominator is never zero before dividing.",
    "A prime number has exactly two positive divisors.",
    "Le chat dort sur le canapé.",
    "数学是科学的语言",
    "",
    "   ",
    "word " * 300,
]


def reference(texts: list[str]) -> list[list[float]]:
    model = resolve_encoder()
    tok = Tokenizer.from_file(str(model.tokenizer_path))
    tok.no_padding()
    tok.enable_truncation(128)
    sess = ort.InferenceSession(str(model.onnx_path), providers=["CPUExecutionProvider"])
    out = []
    for text in texts:
        ids = np.array([tok.encode(text).ids], np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
        }
        hidden = sess.run(None, feeds)[0][0].astype(np.float64)
        v = hidden.mean(axis=0)
        out.append((v / np.linalg.norm(v)).round(6).tolist())
    return out


if __name__ == "__main__":
    path = Path(__file__).with_name("encoder_reference.json")
    path.write_text(json.dumps({"texts": TEXTS, "vectors": reference(TEXTS)}) + "\n")
    print(f"wrote {path}")
