"""The library's own cross-validation samples, kept between calibrations of the same library by the
same engine: a calibration with labelled questions ("+ valid") then asks only those.

Why: the samples of the ordinary folds and the sibling pass depend on the library (its examples,
templates and vectors), the source (its data, docs, "now") and the engine's code, never on the
labelled questions, which are parts of their own (core.match.calibrate.Part). Asking the 5,124
questions of the EHRSQL train library again is most of a calibration's minute; when nothing they
depend on changed, the samples are the same, so the report is the same.

What they depend on is read into two keys:
- the file's name, known before the library is built: the engine (every source file of `core`,
  TEMPLATE_VERSION), the source (its URL and "now"), the library's generation row and fingerprint
  (askdb.models.LibraryGeneration, bumped by askdb.signals when an example, a doc or the source's
  data changes; the active examples' count and last update), the embedding model and the query
  limit the comparisons ran with;
- the content kept inside it, checked after the library is built: every entry (example, question,
  template as stored, key, group), the masked vectors, the catalog. A file whose content differs
  is never read: its samples are asked again and the file is replaced.

The file is a cache under ASKDB_HOME/cache/calibration, one per source, written whole and renamed
into place; a missing, unreadable or stale file only costs the time it would have saved.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from askdb.adapters.library_cache import library_version
from core import match
from core.match.calibrate import CV_FOLDS, Part, PartSamples

logger = logging.getLogger(__name__)

RunParts = Callable[[list[Part], Callable[[Part], PartSamples]], list[PartSamples]]


@functools.lru_cache(maxsize=1)
def engine_hash() -> str:
    """Every source file of the framework-free core (the match stage, comparison of results): a
    changed rule, word list or TEMPLATE_VERSION makes other samples. Read once per process."""
    root = Path(match.__file__).resolve().parent.parent
    digest = hashlib.sha256(f"template {match.TEMPLATE_VERSION}; folds {CV_FOLDS}".encode())
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def reuse_key(source) -> str:
    """The name of the source's kept samples: what they depend on that is known before the library
    is built (see the module's docstring)."""
    version = library_version(source)
    said = [
        engine_hash(), source.pk, str(source.url), str(getattr(source, "as_of", "")),
        version.examples, version.data, version.active[0], str(version.active[1]),
        settings.EMBEDDING_PROVIDER, settings.EMBEDDING_MODEL, settings.ASKDB_CALIBRATION_QUERY_TIMEOUT_S,
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(said, default=str).encode()).hexdigest()[:32]


def content_hash(context: dict[str, Any]) -> str:
    """What the built library holds (cv_context): entries with their stored templates, vectors, the
    catalog and the linkable values, so a file kept for another library is never read whatever its name says."""
    index = context["index"]
    digest = hashlib.sha256()
    for entry in index.entries:
        template = json.dumps(entry.template.to_dict(), sort_keys=True, default=str) if entry.template else ""
        said = [entry.example_id, entry.question, entry.key, entry.group, template]
        digest.update(json.dumps(said, default=str).encode() + b"\0")
    digest.update(index.matrix.tobytes())
    digest.update(repr(context["catalog"]).encode())
    by_text = getattr(context["values"], "_by_text", {})  # the linkable values (core.match.ValueIndex)
    # sort_keys orders both levels (text, then column) in json's C encoder: the same content always
    # hashes alike, a third of the time of sorting ~200,000 values' items in Python first.
    digest.update(json.dumps(by_text, sort_keys=True).encode())
    return digest.hexdigest()


def _path(source) -> Path:
    return Path(settings.ASKDB_HOME) / "cache" / "calibration" / f"source-{source.pk}.json"


def kept_parts(source, key: str) -> tuple[str, dict[Part, PartSamples]] | None:
    """(the content they were asked of, the samples by part) when the source's samples were kept
    under `key`, else None. The file is JSON, never a pickle: reading a cache must not be able to run
    code, whoever wrote the file."""
    try:
        with open(_path(source), encoding="utf-8") as file:
            kept = json.load(file)
        if not isinstance(kept, dict) or kept.get("key") != key:
            return None
        parts = {
            Part(kind=str(kind), fold=int(fold), start=int(start), stop=int(stop)): [
                ({str(k): float(v) for k, v in features.items()}, bool(ok), int(fold_of), int(place))
                for features, ok, fold_of, place in samples
            ]
            for kind, fold, start, stop, samples in kept["parts"]
        }
        return str(kept["content"]), parts
    except FileNotFoundError:
        return None
    except Exception:  # a damaged or foreign cache is asked again, never trusted
        logger.warning("calibration: the kept cross-validation samples could not be read; asked again")
        return None


def keep_parts(source, key: str, content: str, parts: dict[Part, PartSamples]) -> None:
    """Keep the library's own parts' samples (never labelled ones) for the next calibration."""
    path = _path(source)
    mine = [
        [p.kind, p.fold, p.start, p.stop, [list(sample) for sample in samples]]
        for p, samples in parts.items()
        if p.kind != "labelled"
    ]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        with open(partial, "w", encoding="utf-8") as file:
            json.dump({"key": key, "content": content, "parts": mine}, file)
        os.replace(partial, path)
    except OSError as exc:  # a read-only home: the next calibration asks them again
        logger.warning("calibration: could not keep the cross-validation samples (%s)", exc)


def reusing(
    run_parts: RunParts | None,
    kept: dict[Part, PartSamples] | None,
    progress: Callable[[int], None],
    keep: Callable[[dict[Part, PartSamples]], None],
) -> RunParts:
    """calibrate_library's `run_parts`: the kept parts' samples as they were, the others asked (by
    `run_parts`, else one after another here); each kept fold question still counts in `progress`,
    as if asked; `keep` gets every part's samples when any was asked."""
    kept = kept or {}

    def run(parts: list[Part], local: Callable[[Part], PartSamples]) -> list[PartSamples]:
        todo = [p for p in parts if p not in kept]
        for part in parts:
            if part in kept and part.kind == "fold":
                for _ in range(part.stop - part.start):
                    progress(0)
        asked = (
            (run_parts(todo, local) if run_parts is not None else [local(p) for p in todo]) if todo else []
        )
        found = {**kept, **dict(zip(todo, asked, strict=True))}
        if any(p.kind != "labelled" for p in todo):
            keep(found)
        return [found[p] for p in parts]

    return run
