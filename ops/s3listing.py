"""Bucket listings for ops/s3store.py from a sorted in-memory view of its folders.

Why: tansu lists a partition's objects (one per produce request) on every
fetch that has data to return, and stops listing when the fetch's wait
(memstream: 100 ms) runs out; a consumer whose listing never reaches its
offset gets empty fetches forever. localbucket walks and sorts the whole
bucket for every page of 1,000 keys; even walking only the partition's
folder, a consumer at the end of 4,000 one-message batches starved. Here
each folder's entries are read once, kept sorted, and kept current by every
write and delete through the server (its only writer), so a page costs a
binary search and the page itself (measured: fine at 16,000 objects in a
partition, starved at 24,000; docs/operations/embedded-broker.md).

A folder's entries are names, a subfolder's name ending in "/": sorted as
strings that is the byte order S3 lists keys in, subfolders in place.
The answers are localbucket's (tests/integration/test_s3store.py compares
them on the same files), paging and delimiters included.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import localbucket  # type: ignore[import-untyped]

# (contents as (key, file path), common prefixes, truncated, last entry "K:key" or "P:prefix"): localbucket's page.
Page = tuple[list[tuple[str, str]], list[str], bool, str]
# What a listing shows of one file besides its key (the server's own format), or None when the file is gone.
Describe = Callable[[str], str | None]


def first_component(rest: str) -> str:
    """ "a/b/c" -> "a/", "abc" -> "abc": what an entry of this folder must start with to hold keys under `rest`."""
    cut = rest.find("/")
    return rest if cut < 0 else rest[: cut + 1]


@dataclass
class Folder:
    names: list[str]  # sorted; a subfolder's name ends in "/"
    shown: dict[str, str] = field(default_factory=dict)  # what a listing shows of each file, as written or first listed


class Listings:
    """Sorted entries of every folder listed so far, what is shown of their files, and pages of keys.

    `describe(path)` is asked once per file not written through this server
    (files from an earlier run); a write tells what to show with the file.
    """

    def __init__(self, describe: Describe) -> None:
        self._lock = threading.Lock()
        self._folders: dict[str, Folder] = {}
        self._describe = describe

    def entries_from(self, folder: str, bound: str) -> list[str]:
        """The folder's sorted entries from the first one >= `bound`: a copy, so later writes do not shift it."""
        with self._lock:
            names = self._read(folder).names
            return names[bisect.bisect_left(names, bound) :]

    def _read(self, folder: str) -> Folder:
        """The folder's entries, read from disk the first time (under the lock, so no write slips past)."""
        cached = self._folders.get(folder)
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
            return Folder([])  # not kept: any name may be asked for, and most never exist
        self._folders[folder] = Folder(names)
        return self._folders[folder]

    def shown(self, path: str) -> str | None:
        """What a listing shows of a listed file, from memory when it was written here; None when it is gone."""
        folder, name = os.path.split(path)
        known = self._folders.get(folder)
        found = known.shown.get(name) if known is not None else None
        if found is not None:
            return found
        found = self._describe(path)
        if found is not None and known is not None:
            with self._lock:
                # A write that landed meanwhile described the newer file: it wins.
                found = known.shown.setdefault(name, found)
        return found

    def added(self, path: Path, bucket_dir: Path, shown: str) -> None:
        """A file was written at `path`: it, and any folder created for it, join their folders' entries."""
        entry, folder = path.name, path.parent
        with self._lock:
            known = self._folders.get(str(folder))
            if known is not None:
                known.shown[entry] = shown
            while True:
                known = self._folders.get(str(folder))
                if known is not None:
                    at = bisect.bisect_left(known.names, entry)
                    if at < len(known.names) and known.names[at] == entry:
                        return  # already listed, so are the folders above it
                    known.names.insert(at, entry)
                if folder == bucket_dir:
                    return
                entry, folder = f"{folder.name}/", folder.parent

    def removed(self, path: Path, bucket_dir: Path) -> None:
        """The file at `path` is gone, and with it any folder left empty and removed (localbucket's delete)."""
        entry, folder, gone = path.name, path.parent, path
        with self._lock:
            while True:
                known = self._folders.get(str(folder))
                if known is not None:
                    known.shown.pop(entry, None)
                    at = bisect.bisect_left(known.names, entry)
                    if at < len(known.names) and known.names[at] == entry:
                        del known.names[at]
                self._folders.pop(str(gone), None)
                if folder == bucket_dir or folder.exists():
                    return
                entry, gone, folder = f"{folder.name}/", folder, folder.parent

    def page(
        self, bucket_dir: Path, prefix: str, delimiter: str, marker: str, marker_is_prefix: bool, max_keys: int
    ) -> Page:
        """One page of keys after `marker` under `prefix`, grouped at `delimiter`: localbucket's _list_entries."""
        contents: list[tuple[str, str]] = []
        common_prefixes: list[str] = []
        skip = [""]  # the common prefix just listed: the walk steps over everything under it
        last_entry = ""
        for key, path in self._keys(str(bucket_dir), "", prefix, marker, marker_is_prefix, skip):
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
        self, folder: str, rel: str, prefix: str, marker: str, marker_is_prefix: bool, skip: list[str]
    ) -> Iterator[tuple[str, str]]:
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
                    yield from self._keys(os.path.join(folder, name[:-1]), key, prefix, marker, marker_is_prefix, skip)
                continue
            if not key.startswith(prefix):
                continue
            if marker and (key <= marker or (marker_is_prefix and key.startswith(marker))):
                continue
            yield key, os.path.join(folder, name)
