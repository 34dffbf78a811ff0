"""MkDocs hook: the pages written from code are generated at every build, so they never go stale.

mkdocs.yml names this file under `hooks:`. Generated, never stored in docs/:
- reference/api.md and reference/openapi.json: the read service's OpenAPI document;
- reference/configuration.md: every setting of `services.core.config.Settings`;
- concepts/topics.md: every topic in topics.yaml;
- concepts/memory.md: the memory types, layers and states of schemas/memory.py;
- architecture.md: ARCHITECTURE.md at the repository root, which stays the one copy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # mkdocs loads hooks by path, not as part of the package
    sys.path.insert(0, str(ROOT))

from ops.docs_memory import render_memory_model  # noqa: E402
from ops.docs_openapi import openapi_document, render_api  # noqa: E402
from ops.docs_settings import render_settings, render_topics  # noqa: E402


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated pages to the site."""
    spec = openapi_document()
    generated = {
        "reference/api.md": render_api(spec),
        "reference/openapi.json": json.dumps(spec, indent=2) + "\n",
        "reference/configuration.md": render_settings(),
        "concepts/topics.md": render_topics(ROOT / "topics.yaml"),
        "concepts/memory.md": render_memory_model(),
        "architecture.md": (ROOT / "ARCHITECTURE.md").read_text(),
    }
    for uri, content in generated.items():
        files.append(File.generated(config, uri, content=content))
    return files
