"""Encoder: semantics, agreement with stored reference vectors, batching, cache, bad input."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rse_fast.encoder import Encoder
from rse_fast.errors import IntegrityError, ModelNotFoundError
from rse_fast.registry import resolve_encoder

PARAPHRASES = [
    ("The derivative of x squared is 2x.", "Differentiating x^2 gives two times x."),
    ("Never divide by zero.", "Division by zero is not allowed."),
    (
        "The sum of the angles of a triangle is 180 degrees.",
        "A triangle's interior angles add up to 180 degrees.",
    ),
    (
        "Check the base case before using induction.",
        "Verify the base case first when doing a proof by induction.",
    ),
    ("The equation has two real roots.", "There are two real solutions to the equation."),
    ("Prime numbers have exactly two divisors.", "A prime has only two positive divisors."),
    ("The cat is sleeping on the sofa.", "A cat sleeps on the couch."),
    ("It is raining heavily today.", "There is a lot of rain today."),
    ("He bought a new car yesterday.", "Yesterday he purchased a new automobile."),
    ("The meeting was postponed until Friday.", "The meeting has been moved to Friday."),
    (
        "Water boils at 100 degrees Celsius at sea level.",
        "At sea level, water reaches its boiling point at 100 °C.",
    ),
    ("The function is increasing on the interval.", "On this interval the function increases."),
    (
        "Multiply both sides of the equation by 3.",
        "Both sides of the equation are multiplied by three.",
    ),
    ("The probability of rolling a six is one sixth.", "A die shows six with probability 1/6."),
    ("Do not forget to simplify the fraction.", "Remember to reduce the fraction."),
    (
        "The area of a circle is pi r squared.",
        "A circle's area equals pi times the radius squared.",
    ),
    (
        "She finished the marathon in under four hours.",
        "She ran the marathon in less than 4 hours.",
    ),
    ("The library opens at nine in the morning.", "The library opens at 9 am."),
    ("The answer must be a positive integer.", "The result has to be a positive whole number."),
    ("Sort the list before searching it.", "Searching is done after the list is sorted."),
    ("The train was delayed by an hour.", "The train arrived one hour late."),
    (
        "Expand the bracket before collecting terms.",
        "First expand the parentheses, then collect like terms.",
    ),
]


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder(providers=["CPUExecutionProvider"], threads=2)


def test_paraphrases_beat_unrelated_pairs_by_a_margin(encoder):
    a = encoder.encode([p[0] for p in PARAPHRASES])
    b = encoder.encode([p[1] for p in PARAPHRASES])
    sims = a @ b.T
    para = np.diag(sims)
    unrelated = sims[~np.eye(len(PARAPHRASES), dtype=bool)]
    assert para.min() - unrelated.max() > 0.05, (para.min(), unrelated.max())
    assert para.mean() > 0.75 and unrelated.mean() < 0.2


def test_agrees_with_stored_reference_vectors(encoder):
    ref = json.loads(
        (Path(__file__).resolve().parents[2] / "data" / "encoder_reference.json").read_text()
    )
    got = encoder.encode(ref["texts"])
    want = np.array(ref["vectors"], np.float32)
    cos = np.einsum("ij,ij->i", got, want) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.999, cos


def test_output_shape_dtype_norm_and_determinism(encoder):
    texts = ["alpha", "beta gamma", "delta " * 50]
    x = encoder.encode(texts)
    assert x.shape == (3, 384) and x.dtype == np.float32 and x.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    fresh = Encoder(providers=["CPUExecutionProvider"], cache_size=0)
    np.testing.assert_array_equal(fresh.encode(texts), fresh.encode(texts))


def test_invariant_to_batch_size_and_order():
    texts = [f"experience number {i}: " + "word " * (i % 17) for i in range(40)]
    big = Encoder(providers=["CPUExecutionProvider"], cache_size=0, batch_tokens=100_000)
    small = Encoder(providers=["CPUExecutionProvider"], cache_size=0, batch_tokens=130)
    x = big.encode(texts)
    np.testing.assert_allclose(small.encode(texts), x, atol=2e-5)
    perm = np.random.default_rng(0).permutation(len(texts))
    np.testing.assert_allclose(big.encode([texts[i] for i in perm]), x[perm], atol=2e-5)
    singles = np.vstack([big.encode([t]) for t in texts[:5]])
    np.testing.assert_allclose(singles, x[:5], atol=2e-5)


def test_cache_makes_repeats_free_and_is_bounded():
    enc = Encoder(providers=["CPUExecutionProvider"], cache_size=3)
    first = enc.encode(["a b", "c d"])
    hits = enc.cache_hits
    again = enc.encode(["c d", "a b", "a b"])
    assert enc.cache_hits == hits + 3
    np.testing.assert_array_equal(again[1], first[0])
    enc.encode(["e", "f", "g"])
    assert len(enc._cache) == 3 and "a b" not in enc._cache


def test_bad_and_odd_input(encoder):
    assert encoder.encode([]).shape == (0, 384)
    odd = ["", "   ", "x" * 100_000, "naïve café – 数学 😀", "lone \ud800 surrogate"]
    out = encoder.encode(odd)
    assert out.shape == (5, 384) and np.isfinite(out).all()
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        encoder.encode(["ok", 3])
    with pytest.raises(TypeError, match="single str"):
        encoder.encode("not a list")
    with pytest.raises(TypeError):
        encoder.encode([None])


async def test_aencode_matches_encode(encoder):
    texts = ["one", "two", "three"]
    np.testing.assert_array_equal(await encoder.aencode(texts), encoder.encode(texts))


async def test_concurrent_aencode_calls_are_coalesced():
    enc = Encoder(providers=["CPUExecutionProvider"], cache_size=0)
    texts = [f"statement number {i} about a different topic {i * 7}" for i in range(32)]
    alone = enc.encode(texts)
    results = await asyncio.gather(*(enc.aencode([t]) for t in texts))
    for got, want in zip(results, alone, strict=True):
        np.testing.assert_allclose(got[0], want, atol=1e-5)
    # the first call runs alone; the 31 that queue behind it share a few passes
    assert enc.encoder_passes < 8 and enc.calls_coalesced >= 24


async def test_aencode_errors_reach_every_caller():
    enc = Encoder(providers=["CPUExecutionProvider"])
    bad = asyncio.gather(enc.aencode(["fine"]), enc.aencode([None]), return_exceptions=True)
    results = await bad
    assert isinstance(results[1], TypeError)
    with pytest.raises(TypeError, match="single str"):
        await enc.aencode("not a list")
    assert (await enc.aencode(["still works"])).shape == (1, 384)


def test_auto_provider_runs_on_cpu_without_gpu():
    enc = Encoder()  # providers="auto"
    assert enc.provider in ("CPUExecutionProvider", "CUDAExecutionProvider")
    assert enc.encode(["x"]).shape == (1, 384)


def test_local_folder_model_loads_and_is_verified(tmp_path):
    src = resolve_encoder()
    folder = tmp_path / "my-model"
    folder.mkdir()
    shutil.copy(src.onnx_path, folder / "model.onnx")
    shutil.copy(src.tokenizer_path, folder / "tokenizer.json")
    manifest = dict(src.manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    enc = Encoder(folder, providers=["CPUExecutionProvider"])
    assert enc.encode(["hello"]).shape == (1, 384)
    with open(folder / "model.onnx", "r+b") as fh:  # corrupt one byte
        fh.seek(1000)
        byte = fh.read(1)
        fh.seek(1000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(IntegrityError, match="sha256"):
        Encoder(folder)


def test_missing_model_says_what_to_install(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not a registry name"):
        Encoder(tmp_path / "nothing-here")
    folder = tmp_path / "partial"
    folder.mkdir()
    manifest = dict(resolve_encoder().manifest)
    manifest["files"] = {"model.onnx": {"pypi": "some-model-pkg==1.0", "module": "no_such_mod"}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelNotFoundError, match=r"pip install some-model-pkg==1\.0"):
        Encoder(folder)
