"""Paths as a repository sees them: CI annotations, SARIF and lint's table name files relative to the checkout's
root, whichever folder kvprobe runs in (a step's working-directory, a config in a sub-folder, pre-commit)."""
from __future__ import annotations

import os
from pathlib import Path


def repository_root(start: Path | None = None) -> Path:
    """$GITHUB_WORKSPACE under GitHub Actions, else the nearest folder at or above `start` (the working
    directory) holding `.git`, else `start` itself."""
    here = (start or Path.cwd()).resolve()
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace:
        return Path(workspace).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def in_repository(path: str | Path, root: Path | None = None) -> str | None:
    """`path` relative to the repository (POSIX separators), or None when it lies outside it."""
    base = root or repository_root()
    try:
        return Path(path).resolve().relative_to(base).as_posix()
    except (ValueError, OSError):
        return None
