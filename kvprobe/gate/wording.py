"""How the gate writes numbers and CI workflow commands: small, with no analysis imports, so the PR-comment
step (`python -m kvprobe.gate.github`) starts in a fraction of a second."""
from __future__ import annotations

import os
from pathlib import Path

COMMENT_MARKER = "<!-- kvprobe-gate -->"  # finds the sticky PR comment again


# Plain numbers for people: thousands separators, never scientific notation.
def usd(value: float) -> str:
    if value and abs(value) < 0.0001:
        return f"${value:,.6f}"
    return f"${value:,.4f}"


def tokens(value: float) -> str:
    return f"{value:,.0f} tokens"


def shown_path(path: str | None) -> str:
    """A path as the user would type it: relative to the working directory when that is shorter."""
    if not path or not Path(path).is_absolute():
        return path or ""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return relative if len(relative) < len(path) else path


def repo_path(path: str) -> str:
    """A path as GitHub places an annotation: relative to the repository (kvprobe.checkout), whichever folder
    the step ran in; as given when it is outside."""
    from kvprobe.checkout import in_repository

    return in_repository(path) or path


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, title: str, message: str, file: str | None = None, line: int | None = None) -> str:
    """One GitHub Actions workflow command (`::error file=…,line=…,title=…::message`): escaped so that trace
    text can neither end it early nor start another command."""
    props = []
    place = repo_path(file) if file else None
    if place and not Path(place).is_absolute():  # GitHub places annotations on files of the checkout only
        props.append(f"file={_escape_property(place)}")
        if line:
            props.append(f"line={line}")
    props.append(f"title={_escape_property(title)}")
    return f"::{level} {','.join(props)}::{_escape_data(message)}"
