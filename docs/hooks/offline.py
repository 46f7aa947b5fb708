"""MkDocs hook: the site makes no request to any host when it is opened.

nbconvert's notebook template carries a module script that would import Mermaid from a CDN when a notebook holds a
Mermaid diagram (ours hold none): it is removed. Any page that still loads a script, a stylesheet, a font or an image
from another host fails the build, naming the page and the address.
"""

from __future__ import annotations

import re

from mkdocs.exceptions import PluginError

CDN_MODULE = re.compile(r"<script type=\"module\">(?:(?!</script>).)*?https://cdnjs\.cloudflare\.com.*?</script>", re.S)
REMOTE_LOAD = re.compile(r"<(?:script|img|iframe)[^>]*\ssrc=\"(https?:)?//[^\"]+\"|"
                         r"<link[^>]*\srel=\"(?:stylesheet|preload|modulepreload|icon)\"[^>]*\shref=\"(?:https?:)?//[^\"]+\"|"
                         r"@import\s+(?:url\()?[\"']?https?://|url\([\"']?https?://")


def on_post_page(output: str, page, config) -> str:
    output = CDN_MODULE.sub("", output)
    found = REMOTE_LOAD.search(output)
    if found:
        raise PluginError(f"{page.file.src_uri}: loads {found.group(0)[:120]!r} from another host; the site must work "
                          "offline")
    return output
