"""Provider request bodies rendered into ordered, hashed, cacheable blocks.

The names below are imported on first use: a module that needs one part (`detect`, to name a record's
provider or platform: every importer and `usage`) does not load the four renderers and their classes with it.
"""
from __future__ import annotations

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from kvprobe.request.detect import infer_platform, infer_provider
    from kvprobe.request.model import LEVELS, Block, IdentityParam, RenderedRequest
    from kvprobe.request.render import betas_of, model_from_endpoint, render_request

_WHERE = {"Block": "model", "IdentityParam": "model", "LEVELS": "model", "RenderedRequest": "model",
          "render_request": "render", "betas_of": "render", "model_from_endpoint": "render",
          "infer_provider": "detect", "infer_platform": "detect"}
__all__ = ["Block", "IdentityParam", "LEVELS", "RenderedRequest", "render_request", "infer_provider",
           "infer_platform"]


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = globals()[name] = getattr(import_module(f"{__name__}.{where}"), name)  # the next look-up is direct
    return value
