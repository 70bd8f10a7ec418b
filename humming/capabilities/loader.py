"""The YAML loader for profile files: safe (no Python objects), strict (no key twice) and bounded.

Bounds, so that a hostile or broken file is refused quickly with a ProfileError instead of exhausting
memory or the stack:

* nesting depth: at most MAX_DEPTH collections inside each other;
* size after alias expansion: at most MAX_NODES nodes, counting a node once per place it is used, so an
  alias bomb (anchors that reference anchors, each expanding tenfold) is refused from its node graph
  before any value is built; an alias inside its own anchor (a cycle) is refused too.
"""
from __future__ import annotations

from typing import Any

import yaml

from humming.errors import ProfileError

MAX_DEPTH = 32  # nested collections; the deepest built-in profile uses 6
MAX_NODES = 20_000  # nodes after alias expansion; the built-in _targets.yaml, the largest file, has ~1,800


class BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that rejects a key given twice in one mapping and nesting deeper than MAX_DEPTH."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ProfileError(f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *anchor' may be overridden by own keys
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, (str, int, float, bool)) or key is None:
                continue  # the base class reports unhashable keys
            if key in seen:
                raise ProfileError(f"key {_short(key)} given twice (lines {seen[key]} and {line})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _short(key: Any) -> str:
    from humming.capabilities.excerpt import excerpt

    return excerpt(key, 60)


def expanded_size(root: yaml.Node, limit: int = MAX_NODES) -> int:
    """How many nodes `root` stands for once every alias is expanded; ProfileError above `limit` or on a cycle.

    Each distinct node is visited once (its size is remembered), so this is fast however large the expansion.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes and not children_done:
            continue
        children = _children(node)
        if not children_done:
            if key in open_nodes:
                raise ProfileError(f"line {node.start_mark.line + 1}: an alias refers to a node that contains it "
                                   "(a cycle)")
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        open_nodes.discard(key)
        total = 1 + sum(sizes[id(child)] for child in children)
        if total > limit:
            raise ProfileError(f"line {node.start_mark.line + 1}: this value expands to more than {limit} "
                               "YAML nodes (each use of an *alias counting in full); a profile is far smaller")
        sizes[key] = total
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_bounded(text: str) -> Any:
    """The document in `text`, built only after its depth and expanded size are checked."""
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
