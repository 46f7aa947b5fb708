"""JSON and YAML whose nesting and size are bounded before they are built into Python values.

JSON: the depth of its brackets is counted (strings left out) with numpy before ``json.loads`` sees it, so an
answer of 200,000 ``[`` is refused in a millisecond instead of raising ``RecursionError``. YAML: a safe loader
(``yaml.SafeLoader``: no tags that build objects) that also refuses a key given twice in one mapping, nesting
deeper than :data:`MAX_DEPTH` while it composes, a document of more than :data:`MAX_YAML_NODES` values once its
aliases are expanded (the "billion laughs"), an alias that refers to itself, and numbers too long to convert.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import yaml

from depthlab.bounded.files import BoundError

MAX_DEPTH = 64
MAX_YAML_NODES = 200_000


_SPECIAL = np.zeros(256, dtype=bool)
_SPECIAL[list(b'[]{}"\\')] = True


def json_depth(text: str | bytes) -> int:
    """How deep the lists and objects of the JSON ``text`` nest (0 for a plain value), brackets inside strings left
    out. Vectorised over the brackets, quotes and backslashes only (a quote counts unless an odd run of
    backslashes comes just before it), so plain text costs one pass."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    raw = np.frombuffer(text, dtype=np.uint8)
    where = np.flatnonzero(_SPECIAL[raw])
    if not where.size:
        return 0
    codes = raw[where]
    backslash = codes == ord("\\")
    follows = np.concatenate(([False], (np.diff(where) == 1) & backslash[:-1]))  # right after a backslash
    starts = backslash & ~follows  # the first backslash of each run
    index = np.arange(codes.size, dtype=np.int64 if codes.size >= 1 << 31 else np.int32)
    first = np.maximum.accumulate(np.where(starts, index, 0))  # where the current run began
    run = np.where(backslash, index - first + 1, 0)  # length of the backslash run ending here
    escaped = follows & (np.concatenate(([0], run[:-1])) % 2 == 1)
    quote = (codes == ord('"')) & ~escaped
    outside = (np.cumsum(quote) - quote) % 2 == 0  # an even number of quotes before: not inside a string
    opens = outside & ((codes == ord("[")) | (codes == ord("{")))
    closes = outside & ((codes == ord("]")) | (codes == ord("}")))
    return int(np.cumsum(opens.astype(np.int32) - closes).max(initial=0))


def parse_json(text: str | bytes, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """The value of the JSON ``text``; a :class:`BoundError` naming ``what`` for text that is not JSON or that
    nests deeper than ``max_depth``."""
    opening = text.count("[") + text.count("{") if isinstance(text, str) else text.count(b"[") + text.count(b"{")
    depth = 0  # the usual case: too few brackets to nest deeper than allowed (not even encoded to be counted)
    if opening > max_depth:
        depth = json_depth(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    if depth > max_depth:
        raise BoundError(what, f"JSON nested {depth:,} levels deep, more than the {max_depth} allowed")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise BoundError(what, f"not JSON ({' '.join(str(e).split())[:120]})") from None


class BoundedYamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the bounds of this module; errors are ``yaml.YAMLError`` with a position."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"lists and mappings nest more than {MAX_DEPTH} "
                                                              "levels deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        _measure(node, {}, set(), 1)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key_node.value!r}",
                                                            key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as e:  # int() of a number past Python's 4,300 digits, and friends
            raise yaml.constructor.ConstructorError(None, None, " ".join(str(e).split())[:120],
                                                    node.start_mark) from None


def _measure(node: yaml.Node, seen: dict[int, tuple[int, int]], open_: set[int], depth: int) -> tuple[int, int]:
    """(values, levels) under ``node``, ``depth`` levels down, with every alias expanded: refuses a document past
    MAX_YAML_NODES values or MAX_DEPTH levels (aliases can nest deeper than the text does), or a cycle."""
    key = id(node)
    height = seen[key][1] if key in seen else 1
    if depth + height - 1 > MAX_DEPTH:
        raise _refusal(f"lists and mappings nest more than {MAX_DEPTH} levels deep once aliases are expanded", node)
    if key in seen:
        return seen[key]
    if key in open_:
        raise _refusal("an alias refers to the list or mapping it is in", node)
    open_.add(key)
    children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                else node.value if isinstance(node, yaml.SequenceNode) else [])
    size = 1
    for child in children:
        child_size, child_height = _measure(child, seen, open_, depth + 1)
        size, height = size + child_size, max(height, child_height + 1)
        if size > MAX_YAML_NODES:
            raise _refusal(f"more than {MAX_YAML_NODES:,} values once aliases are expanded", node)
    open_.discard(key)
    seen[key] = (size, height)
    return size, height


def _refusal(problem: str, node: yaml.Node) -> yaml.YAMLError:
    return yaml.composer.ComposerError(None, None, problem, node.start_mark)


def parse_yaml(text: str, what: str) -> Any:
    """The value of the YAML ``text`` read by :class:`BoundedYamlLoader`; a :class:`BoundError` naming ``what``
    (and the line and column) for anything it refuses."""
    loader = None
    try:
        loader = BoundedYamlLoader(text)  # its reader refuses control characters (a NUL) at once
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise BoundError(what, yaml_problem(e)) from None
    except RecursionError:  # a structure the composer's bound does not see (deep flow collections in a key)
        raise BoundError(what, "too deeply nested to be read") from None
    finally:
        if loader is not None:
            loader.dispose()


def yaml_problem(error: yaml.YAMLError) -> str:
    """``not valid YAML at line L, column C: PROBLEM`` for a YAML error."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"not valid YAML{where}: {' '.join(str(getattr(error, 'problem', None) or error).split())}"
