"""Model registry: manifests under ``rse_fast.models`` (the top-level ``models/`` folder), files
resolved offline from installed PyPI packages or a local folder, verified by size and sha256."""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rse_fast.errors import IntegrityError, ModelNotFoundError

DEFAULT_ENCODER = "all-minilm-l6-v2"
_verified: set[tuple[str, int, int]] = set()


@dataclass(frozen=True)
class EncoderModel:
    name: str
    onnx_path: Path
    tokenizer_path: Path
    manifest: dict[str, Any]

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify_file(path: Path, spec: dict[str, Any]) -> None:
    """Check size and sha256 against the manifest entry (once per process per file version)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _verified:
        return
    if "size" in spec and st.st_size != int(spec["size"]):
        raise IntegrityError(f"{path}: size {st.st_size} bytes, manifest says {spec['size']}")
    if "sha256" in spec:
        digest = sha256_file(path)
        if digest != spec["sha256"]:
            raise IntegrityError(f"{path}: sha256 {digest}, manifest says {spec['sha256']}")
    _verified.add(key)


def builtin_dir(name: str) -> Path | None:
    root = importlib.resources.files("rse_fast.models")
    candidate = Path(str(root)) / name
    return candidate if (candidate / "manifest.json").is_file() else None


def _locate(folder: Path, filename: str, spec: dict[str, Any], model: str) -> Path:
    local = folder / filename
    if local.is_file():
        return local
    module = spec.get("module")
    if module and importlib.util.find_spec(module) is not None:
        packaged = Path(str(importlib.resources.files(module))) / filename
        if packaged.is_file():
            return packaged
    hint = (
        f"install it with `pip install {spec['pypi']}`"
        if "pypi" in spec
        else (f"put it in {folder}")
    )
    raise ModelNotFoundError(f"{filename} of encoder model {model!r} not found: {hint}")


def resolve_encoder(model: str | os.PathLike[str] = DEFAULT_ENCODER) -> EncoderModel:
    """A registry name, or a folder holding manifest.json + model.onnx + tokenizer.json."""
    folder = builtin_dir(str(model)) if isinstance(model, str) else None
    if folder is None:
        folder = Path(model)
        if not (folder / "manifest.json").is_file():
            raise ModelNotFoundError(
                f"encoder model {str(model)!r}: not a registry name ({DEFAULT_ENCODER!r} is) "
                "and not a folder with manifest.json, model.onnx and tokenizer.json"
            )
    manifest = json.loads((folder / "manifest.json").read_text())
    files = manifest.get("files", {})
    name = manifest.get("name", folder.name)
    onnx = _locate(folder, "model.onnx", files.get("model.onnx", {}), name)
    tok = _locate(folder, "tokenizer.json", files.get("tokenizer.json", {}), name)
    verify_file(onnx, files.get("model.onnx", {}))
    verify_file(tok, files.get("tokenizer.json", {}))
    return EncoderModel(name, onnx, tok, manifest)
