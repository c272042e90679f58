"""Versioned answerability models on disk, one folder per training run:

    ASKDB_HOME/models/answerability/<source>/<version>/{combiner.json, library.npz, manifest.json}
    ASKDB_HOME/models/answerability/<source>/current      (the active version's name)

A version is never changed after it is written; activating another one only rewrites `current`,
so rolling back is one command and a running scorer notices the switch by reading that file.
The encoder is the installed frozen one (the manifest names it); `library.npz` keeps the training
questions' vectors so loading a model never re-encodes its library.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from askdb.answerability.model import Combiner, load_combiner

CURRENT = "current"


class StoreError(LookupError):
    """A version that does not exist or cannot be read; the message names it."""


def models_root(home: Path | None = None) -> Path:
    if home is None:
        from django.conf import settings

        home = Path(settings.ASKDB_HOME)
    return Path(home) / "models" / "answerability"


def source_dir(source_name: str, *, home: Path | None = None) -> Path:
    return models_root(home) / source_name


def new_version(created: datetime, salt: str) -> str:
    """Sortable by time, unique by a short hash of the library snapshot and the instant."""
    digest = hashlib.sha256(f"{salt}/{created.isoformat()}".encode()).hexdigest()[:6]
    return f"{created:%Y%m%dT%H%M%S}-{digest}"


def save_version(
    source_name: str,
    version: str,
    *,
    combiner: Combiner,
    threshold: float,
    manifest: dict[str, Any],
    library: tuple[list[str], np.ndarray] | None = None,
    activate: bool = True,
    home: Path | None = None,
) -> Path:
    """Write a complete version folder (via a temporary name, so a crash leaves no half model)."""
    base = source_dir(source_name, home=home)
    final = base / version
    if final.exists():
        raise StoreError(f"answerability model version {version} already exists for {source_name}")
    tmp = base / f".{version}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if library is not None:
            texts, vectors = library
            with open(tmp / "library.npz", "wb") as fh:
                np.savez_compressed(
                    fh, texts=np.array(texts, dtype=object), vectors=vectors.astype(np.float32)
                )
        (tmp / "combiner.json").write_text(
            json.dumps({**combiner.to_dict(), "threshold": threshold}, indent=2)
        )
        (tmp / "manifest.json").write_text(
            json.dumps({"version": version, **manifest}, indent=2, default=str)
        )
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if activate:
        set_current(source_name, version, home=home)
    return final


def set_current(source_name: str, version: str, *, home: Path | None = None) -> None:
    base = source_dir(source_name, home=home)
    if not (base / version / "manifest.json").exists():
        known = ", ".join(v["version"] for v in list_versions(source_name, home=home)) or "none"
        raise StoreError(f"no answerability model version {version!r} for {source_name} (known: {known})")
    tmp = base / f".{CURRENT}.{os.getpid()}"
    tmp.write_text(version + "\n")
    os.replace(tmp, base / CURRENT)  # atomic: a reader sees the old or the new name, never half


def current_version(source_name: str, *, home: Path | None = None) -> str | None:
    try:
        name = (source_dir(source_name, home=home) / CURRENT).read_text().strip()
    except FileNotFoundError:
        return None
    return name or None


def read_manifest(source_name: str, version: str, *, home: Path | None = None) -> dict[str, Any]:
    path = source_dir(source_name, home=home) / version / "manifest.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read the manifest of answerability model {version}: {exc}") from exc


def list_versions(source_name: str, *, home: Path | None = None) -> list[dict[str, Any]]:
    """Manifests of every stored version, oldest first, each with `current` set."""
    base = source_dir(source_name, home=home)
    if not base.is_dir():
        return []
    active = current_version(source_name, home=home)
    out = []
    for path in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            manifest = read_manifest(source_name, path.name, home=home)
        except StoreError:
            continue
        out.append({**manifest, "version": path.name, "current": path.name == active})
    return out


def load_version(
    source_name: str, version: str, *, home: Path | None = None
) -> tuple[Combiner, float, dict[str, Any], dict[str, np.ndarray]]:
    """(combiner, threshold, manifest, {question text: vector}) of one stored version."""
    path = source_dir(source_name, home=home) / version
    manifest = read_manifest(source_name, version, home=home)
    try:
        data = json.loads((path / "combiner.json").read_text())
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read the combiner of answerability model {version}: {exc}") from exc
    vectors: dict[str, np.ndarray] = {}
    if (path / "library.npz").exists():
        try:
            with np.load(path / "library.npz", allow_pickle=True) as npz:
                vectors = dict(zip((str(t) for t in npz["texts"]), npz["vectors"], strict=True))
        except (OSError, ValueError, KeyError) as exc:
            raise StoreError(
                f"cannot read the library vectors of answerability model {version}: {exc}"
            ) from exc
    return load_combiner(data), float(data["threshold"]), manifest, vectors
