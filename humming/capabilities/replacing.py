"""Name clashes between profile files: replacing a visible profile must be declared, siblings must differ.

A file on HUMMING_PROFILE_PATH whose `name` is already taken by a built-in profile (or by one in an earlier
path directory) replaces it only if it says `replaces: NAME` with its own name; `replaces` naming a profile
that is not there, or another name than the file's own, is an error as well.
"""
from __future__ import annotations

from humming.capabilities.document import ProfileDoc


def check_replaces(doc: ProfileDoc, earlier: list[ProfileDoc]) -> None:
    """ProfileError unless `doc` declares `replaces` exactly when `earlier` (same-name files it would hide)
    is not empty."""
    replaces = doc.raw.get("replaces")
    if replaces is not None and replaces != doc.name:
        doc.where.key("replaces").fail(f"names {replaces!r}, but this profile is {doc.name!r}; a file replaces "
                                       "only the profile of its own name")
    if earlier and replaces is None:
        others = ", ".join(d.display for d in earlier)
        doc.where.key("name").fail(f"profile {doc.name!r} is already defined by {others}; a file replaces it "
                                   f"only when it says so: add 'replaces: {doc.name}' (or choose another name)")
    if replaces is not None and not earlier:
        doc.where.key("replaces").fail(f"there is no other profile {doc.name!r} to replace (none built in, none "
                                       "in an earlier HUMMING_PROFILE_PATH directory); remove 'replaces'")


def check_siblings(doc: ProfileDoc, siblings: list[ProfileDoc]) -> None:
    """ProfileError if another file of the same directory has `doc`'s name (the registry would refuse it)."""
    same = [s.display for s in siblings if s.name == doc.name]
    if same:
        doc.where.key("name").fail(f"duplicate profile name {doc.name!r}: also in {', '.join(same)} in the same "
                                   "directory (one directory may define a name only once)")
