"""Where a benchmark's results go: an optional JSON payload and an optional markdown table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_results(payload: dict[str, Any], markdown: str, json_path: str | None, markdown_path: str | None) -> None:
    """Write ``payload`` as indented JSON to ``json_path`` and ``markdown`` to ``markdown_path`` (each when
    given; folders made as needed)."""
    for path, text in ((json_path, json.dumps(payload, indent=2)), (markdown_path, markdown)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text + "\n")
