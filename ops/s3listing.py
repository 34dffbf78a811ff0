"""Bucket listings for ops/s3store.py from a sorted in-memory view of its folders.

Why: tansu lists a partition's objects (one per produce request) on every
fetch that has data to return, and stops listing when the fetch's wait
(memstream: 100 ms) runs out; a consumer whose listing never reaches its
offset gets empty fetches forever. localbucket walks and sorts the whole
bucket for every page of 1,000 keys, so with a few thousand objects in a
partition a consumer at the end of it starved (measured: 4,000 one-message
batches). Here each folder's entries are read once, kept sorted, and kept
current by every write and delete through the server (its only writer), so
a page costs a binary search and the page itself.

A folder's entries are names, a subfolder's name ending in "/": sorted as
strings that is the byte order S3 lists keys in, subfolders in place.
The answers are localbucket's (tests/integration/test_s3store.py compares
them on the same files), paging and delimiters included.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import localbucket  # type: ignore[import-untyped]

# (contents as (key, file), common prefixes, truncated, last entry "K:key" or "P:prefix"): localbucket's page.
Page = tuple[list[tuple[str, Path]], list[str], bool, str]


def first_component(rest: str) -> str:
    """ "a/b/c" -> "a/", "abc" -> "abc": what an entry of this folder must start with to hold keys under `rest`."""
    cut = rest.find("/")
    return rest if cut < 0 else rest[: cut + 1]


class Listings:
    """Sorted entries of every folder listed so far, and pages of keys read from them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folders: dict[str, list[str]] = {}

    def entries_from(self, folder: Path, bound: str) -> list[str]:
        """The folder's sorted entries from the first one >= `bound`: a copy, so later writes do not shift it."""
        with self._lock:
            names = self._read(folder)
            return names[bisect.bisect_left(names, bound) :]

    def _read(self, folder: Path) -> list[str]:
        """The folder's entries, read from disk the first time (under the lock, so no write slips past)."""
        cached = self._folders.get(str(folder))
        if cached is not None:
            return cached
        try:
            with os.scandir(folder) as found:
                names = sorted(
                    f"{e.name}/" if e.is_dir(follow_symlinks=False) else e.name
                    for e in found
                    if e.is_dir(follow_symlinks=False)
                    or (e.is_file(follow_symlinks=False) and not e.name.startswith(localbucket.TEMP_PREFIX))
                )
        except (FileNotFoundError, NotADirectoryError):
            return []  # not kept: any name may be asked for, and most never exist
        self._folders[str(folder)] = names
        return names

    def added(self, path: Path, bucket_dir: Path) -> None:
        """A file was written at `path`: it, and any folder created for it, join their folders' entries."""
        entry, folder = path.name, path.parent
        with self._lock:
            while True:
                names = self._folders.get(str(folder))
                if names is not None:
                    at = bisect.bisect_left(names, entry)
                    if at < len(names) and names[at] == entry:
                        return  # already listed, so are the folders above it
                    names.insert(at, entry)
                if folder == bucket_dir:
                    return
                entry, folder = f"{folder.name}/", folder.parent

    def removed(self, path: Path, bucket_dir: Path) -> None:
        """The file at `path` is gone, and with it any folder left empty and removed (localbucket's delete)."""
        entry, folder, gone = path.name, path.parent, path
        with self._lock:
            while True:
                names = self._folders.get(str(folder))
                if names is not None:
                    at = bisect.bisect_left(names, entry)
                    if at < len(names) and names[at] == entry:
                        del names[at]
                self._folders.pop(str(gone), None)
                if folder == bucket_dir or folder.exists():
                    return
                entry, gone, folder = f"{folder.name}/", folder, folder.parent

    def page(
        self, bucket_dir: Path, prefix: str, delimiter: str, marker: str, marker_is_prefix: bool, max_keys: int
    ) -> Page:
        """One page of keys after `marker` under `prefix`, grouped at `delimiter`: localbucket's _list_entries."""
        contents: list[tuple[str, Path]] = []
        common_prefixes: list[str] = []
        skip = [""]  # the common prefix just listed: the walk steps over everything under it
        last_entry = ""
        for key, path in self._keys(bucket_dir, "", prefix, marker, marker_is_prefix, skip):
            common = ""
            if delimiter:
                cut = key.find(delimiter, len(prefix))
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
            if common and common_prefixes and common_prefixes[-1] == common:
                continue
            if len(contents) + len(common_prefixes) >= max_keys:
                return contents, common_prefixes, max_keys > 0, last_entry
            if common:
                common_prefixes.append(common)
                skip[0] = common
                last_entry = "P:" + common
            else:
                contents.append((key, path))
                last_entry = "K:" + key
        return contents, common_prefixes, False, last_entry

    def _keys(
        self, folder: Path, rel: str, prefix: str, marker: str, marker_is_prefix: bool, skip: list[str]
    ) -> Iterator[tuple[str, Path]]:
        """Keys under `folder` (whose keys start with `rel`) that match `prefix` and follow `marker`, in order.

        Entries that cannot match are stepped over by binary search: those
        before the prefix's or the marker's component at this level, and
        whole subfolders the marker or `skip` rule out.
        """
        bound = ""
        if marker:
            if marker.startswith(rel):
                bound = first_component(marker[len(rel) :])
            elif marker > rel:
                return  # every key here sorts before the marker
        need = first_component(prefix[len(rel) :]) if len(prefix) > len(rel) else ""
        for name in self.entries_from(folder, max(bound, need)):
            if need and not name.startswith(need):
                if name > need:
                    return
                continue
            key = rel + name
            if skip[0] and key.startswith(skip[0]):
                continue
            if name.endswith("/"):
                if not (marker_is_prefix and marker and key.startswith(marker)):
                    yield from self._keys(folder / name[:-1], key, prefix, marker, marker_is_prefix, skip)
                continue
            if not key.startswith(prefix):
                continue
            if marker and (key <= marker or (marker_is_prefix and key.startswith(marker))):
                continue
            yield key, folder / name
