"""One kvprobe comment per pull request, kept up to date (GitHub's REST API, with the token the job has).

`python -m kvprobe.gate.github comment SUMMARY.md` is what action.yml runs after the gate, whatever its
outcome (an empty SUMMARY: the gate did not run, and the comment says so). The comment is found again by a
hidden marker, so every push edits it instead of adding another, and it always holds the latest run's word. Commenting is a courtesy:
no pull request, no token, or a token that may not write (a fork's pull request) is a warning, never a
failed job.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

from kvprobe.gate.wording import COMMENT_MARKER, annotation

PAGE = 100
# the comment and job summary of a run whose gate did not run: never the verdict of an earlier run
DID_NOT_RUN = ("### kvprobe gate: ❗ did not run\n\nA step before the gate failed (the install, the local engine or "
               "the capture): see the job's log. No check was made on this run, so no earlier verdict stands.\n")


def pull_request_number(event_path: str | None) -> int | None:
    """The pull request this run is for, from the event payload GitHub writes ($GITHUB_EVENT_PATH)."""
    if not event_path or not Path(event_path).is_file():
        return None
    try:
        event = json.loads(Path(event_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pr = event.get("pull_request") if isinstance(event, dict) else None
    number = pr.get("number") if isinstance(pr, dict) else None
    return number if isinstance(number, int) else None


def _find(client: httpx.Client, repo: str, number: int) -> int | None:
    page = 1
    while True:
        res = client.get(f"/repos/{repo}/issues/{number}/comments", params={"per_page": PAGE, "page": page})
        res.raise_for_status()
        comments = res.json()
        for comment in comments:
            if COMMENT_MARKER in (comment.get("body") or ""):
                return comment["id"]
        if len(comments) < PAGE:
            return None
        page += 1


def upsert_comment(api: str, repo: str, number: int, token: str, text: str) -> str:
    """Create the comment, or edit the one a previous run made; "created" or "updated"."""
    body = f"{COMMENT_MARKER}\n{text}"
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
               "X-GitHub-Api-Version": "2022-11-28"}
    with httpx.Client(base_url=api.rstrip("/"), headers=headers, timeout=30) as client:
        found = _find(client, repo, number)
        if found is None:
            client.post(f"/repos/{repo}/issues/{number}/comments", json={"body": body}).raise_for_status()
            return "created"
        client.patch(f"/repos/{repo}/issues/comments/{found}", json={"body": body}).raise_for_status()
        return "updated"


def _warn(message: str) -> int:
    sys.stderr.write(annotation("warning", "kvprobe gate: PR comment", message) + "\n")
    return 0


def _text(summary: Path | None, env: dict[str, Any]) -> str:
    """The gate's summary, or (no summary: the gate did not run) DID_NOT_RUN, added to the job summary too."""
    if summary is not None and summary.is_file():
        return summary.read_text(encoding="utf-8")
    job = env.get("GITHUB_STEP_SUMMARY")
    if job:
        try:
            with open(job, "a", encoding="utf-8") as fh:
                fh.write(DID_NOT_RUN)
        except OSError as exc:
            _warn(f"cannot write the job summary: {exc.strerror or exc}")
    return DID_NOT_RUN


def comment(summary: Path | None, env: dict[str, Any]) -> int:
    text = _text(summary, env)
    number = pull_request_number(env.get("GITHUB_EVENT_PATH"))
    token, repo = env.get("GITHUB_TOKEN"), env.get("GITHUB_REPOSITORY")
    if number is None:
        print("kvprobe: not a pull request: no comment")
        return 0
    if not token or not repo:
        return _warn("no token (set the action's github-token): no comment")
    try:
        done = upsert_comment(env.get("GITHUB_API_URL") or "https://api.github.com", repo, number, token, text)
    except httpx.HTTPStatusError as exc:
        hint = " (a token from a fork's pull request may not write; grant `pull-requests: write`)" \
            if exc.response.status_code in (401, 403, 404) else ""
        return _warn(f"cannot comment on #{number}: HTTP {exc.response.status_code}{hint}")
    except (httpx.HTTPError, OSError) as exc:
        return _warn(f"cannot comment on #{number}: {exc}")
    print(f"kvprobe: {done} the comment on #{number}")
    return 0


def main(argv: list[str]) -> int:
    """`comment SUMMARY.md`; an empty SUMMARY (the gate did not run) comments DID_NOT_RUN."""
    if len(argv) != 2 or argv[0] != "comment":
        sys.stderr.write("usage: python -m kvprobe.gate.github comment SUMMARY.md\n")
        return 2
    return comment(Path(argv[1]) if argv[1] else None, dict(os.environ))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
