"""Reading what depthlab does not trust, bounded before it is read: files, JSON, YAML and safetensors headers.

Every file a command reads (configs, presets, circuits, checkpoints, manifests, sidecars) and every answer it
parses (endpoint bodies, store rows) goes through here, as SQLite and safetensors treat their input: the kind of
file is checked before a byte is read (a regular file, never a device, a FIFO or a folder, also behind a
symlink), its size against a limit, its nesting depth before it is parsed, and a safetensors file's header
before its data. A refusal is a :class:`BoundError` (a ``UserError``: one line, exit code 2) naming the input and
the limit. The limits (documented in the README's reliability table):

=========================  ==========================================================================
:data:`MAX_TEXT_BYTES`     a YAML config, preset or circuit file: 1 MiB (the largest preset is 6 KB)
:data:`MAX_JSON_BYTES`     a JSON file depthlab wrote (sidecar, manifest, exported config): 16 MiB
:data:`MAX_DEPTH`          nesting of lists and mappings in YAML and JSON: 64 levels (a config has 4)
:data:`MAX_YAML_NODES`     values in one YAML document, aliases counted each time used: 200,000
:data:`MAX_HEADER_BYTES`   a safetensors header: 16 MiB (safetensors' own parser allows 100 MB)
=========================  ==========================================================================

Checkpoints are bounded by what the run's model can hold (``training.checkpoint``), endpoint bodies by
``llm.runners.MAX_BODY_BYTES``, sweep grids by ``config.MAX_GRID_POINTS``.
"""

from depthlab.bounded.files import (
    MAX_JSON_BYTES,
    MAX_TEXT_BYTES,
    BoundError,
    Unreadable,
    kind_of,
    open_regular,
    read_file,
)
from depthlab.bounded.safetensors import MAX_HEADER_BYTES, SafetensorsHeader, read_safetensors
from depthlab.bounded.text import MAX_DEPTH, MAX_YAML_NODES, BoundedYamlLoader, json_depth, parse_json, parse_yaml

__all__ = [
    "MAX_DEPTH",
    "MAX_HEADER_BYTES",
    "MAX_JSON_BYTES",
    "MAX_TEXT_BYTES",
    "MAX_YAML_NODES",
    "BoundError",
    "BoundedYamlLoader",
    "SafetensorsHeader",
    "Unreadable",
    "json_depth",
    "kind_of",
    "open_regular",
    "parse_json",
    "parse_yaml",
    "read_file",
    "read_safetensors",
]
