"""The profile registry: built-in profiles plus every directory in HUMMING_PROFILE_PATH.

HUMMING_PROFILE_PATH is an os.pathsep-separated list of directories. A profile in a later directory
replaces one of the same name from an earlier directory (or a built-in) only when its file says so with
`replaces: NAME` (its own name); otherwise the name clash is a ProfileError, so that a copied or
misnamed file never silently takes a built-in's place. Inside one directory a name may appear only once.
"""
from __future__ import annotations

import os
from pathlib import Path

from humming import settings
from humming.capabilities.build import build
from humming.capabilities.checks import Where, closest
from humming.capabilities.document import ProfileDoc, parse_document
from humming.capabilities.inherit import merge
from humming.capabilities.model import Capabilities
from humming.capabilities.replacing import check_replaces, check_siblings
from humming.capabilities.rules import Rules, load_rules
from humming.capabilities.yamlio import builtin_profile_dir, display_name, profile_files
from humming.errors import ProfileError

PATH_ENV = "HUMMING_PROFILE_PATH"


def env_profile_dirs() -> list[Path]:
    """Directories named by HUMMING_PROFILE_PATH, in order; a missing directory is an error."""
    dirs = []
    for part in settings.raw(PATH_ENV).split(os.pathsep):
        if not part.strip():
            continue
        path = Path(part).expanduser()
        if not path.is_dir():
            raise ProfileError(f"{PATH_ENV}: {part!r} is not a directory")
        dirs.append(path)
    return dirs


class Registry:
    """All profiles visible from a list of directories (built-ins first)."""

    def __init__(self, extra_dirs: list[Path] | None = None):
        self.builtin = builtin_profile_dir()
        self.dirs: list[Path] = [self.builtin] + list(env_profile_dirs() if extra_dirs is None else extra_dirs)
        self.rules: Rules = load_rules(self.dirs, self.builtin)
        self.docs: dict[str, ProfileDoc] = {}
        self.by_name: dict[str, list[ProfileDoc]] = {}  # every file of each name, in directory order
        self._read: set[Path] = set()  # a file below two path directories (a dir and its subdir) is read once
        for directory in self.dirs:
            found = self._read_directory(directory)
            for name, doc in found.items():
                check_replaces(doc, self.by_name.get(name, []))
                self.by_name.setdefault(name, []).append(doc)
            self.docs.update(found)
        self._built: dict[str, Capabilities] = {}

    def _read_directory(self, directory: Path) -> dict[str, ProfileDoc]:
        docs: dict[str, ProfileDoc] = {}
        for path in profile_files(directory):
            if path.resolve() in self._read:
                continue
            self._read.add(path.resolve())
            doc = parse_document(path, display_name(path, self.builtin))
            if doc.name in docs:
                doc.where.key("name").fail(f"duplicate profile name {doc.name!r} (also in {docs[doc.name].display})")
            docs[doc.name] = doc
        return docs

    # ---- lookup ----------------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self.docs)

    def get(self, name: str) -> Capabilities:
        if name not in self._built:
            if name not in self.docs:
                raise ProfileError(f"unknown profile {name!r}{closest(name, self.docs)} "
                                   f"(known: {', '.join(self.names())}; add one in a {PATH_ENV} directory)")
            self._built[name] = self._resolve(self.docs[name], self.docs)
        return self._built[name]

    def all(self, include_abstract: bool = True) -> list[Capabilities]:
        profiles = [self.get(name) for name in self.names()]
        return [p for p in profiles if include_abstract or not p.abstract]

    def load_file(self, path: str | Path) -> Capabilities:
        """Check one file (and its parents): parents come from the same directory first, then the registry."""
        path = Path(path)
        doc = parse_document(path, display_name(path, self.builtin))
        local: dict[str, ProfileDoc] = {}
        siblings: list[ProfileDoc] = []
        for sibling in profile_files(path.parent):
            if sibling.resolve() == path.resolve():
                continue
            try:  # a broken sibling only matters if it is a parent, and then its own check reports it
                other = parse_document(sibling, display_name(sibling, self.builtin))
            except ProfileError:
                continue
            siblings.append(other)
            local.setdefault(other.name, other)
        check_siblings(doc, siblings)
        visible = [d for d in self.by_name.get(doc.name, []) if not _same_file(d.path, path)]
        if not path.resolve().is_relative_to(self.builtin.resolve()):  # a built-in is the one replaced
            check_replaces(doc, visible)
        docs = {**self.docs, **local, doc.name: doc}
        return self._resolve(doc, docs)

    # ---- inheritance -------------------------------------------------------------------------
    def _chain(self, doc: ProfileDoc, docs: dict[str, ProfileDoc]) -> list[ProfileDoc]:
        chain = [doc]
        while chain[-1].extends is not None:
            child = chain[-1]
            parent_name = child.extends
            where: Where = child.where.key("extends")
            if parent_name not in docs:
                where.fail(f"unknown parent profile {parent_name!r}{closest(parent_name, docs)}")
            names = [d.name for d in chain]
            if parent_name in names:  # reported at the profile where the cycle starts
                start = names.index(parent_name)
                chain[start].where.key("extends").fail("extends cycle: " + " -> ".join(names[start:] + [parent_name]))
            chain.append(docs[parent_name])
        return list(reversed(chain))

    def _resolve(self, doc: ProfileDoc, docs: dict[str, ProfileDoc]) -> Capabilities:
        chain = self._chain(doc, docs)
        return build(chain, merge(chain), self.rules)


def _same_file(a: Path, b: Path) -> bool:
    """The same file, or a byte-identical copy of it (validating another checkout's copy of a built-in)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


_DEFAULT: tuple[str, Registry] | None = None


def default_registry() -> Registry:
    """The registry for the current HUMMING_PROFILE_PATH (rebuilt when the variable changes)."""
    global _DEFAULT
    key = settings.raw(PATH_ENV)
    if _DEFAULT is None or _DEFAULT[0] != key:
        _DEFAULT = (key, Registry())
    return _DEFAULT[1]


def reload_profiles() -> Registry:
    """Forget cached profiles (after editing files) and read them again."""
    global _DEFAULT
    _DEFAULT = None
    return default_registry()


def get_profile(name: str) -> Capabilities:
    """The resolved profile `name`; ProfileError listing close names if there is none."""
    return default_registry().get(name)


def list_profiles(include_abstract: bool = True) -> list[Capabilities]:
    """Every visible profile, resolved and validated, sorted by name."""
    return default_registry().all(include_abstract)


def load_profile_file(path: str | Path) -> Capabilities:
    """Load and validate one profile file against the visible registry (for `profile validate`)."""
    return default_registry().load_file(path)
