"""The byte-pair encodings token counts are made with (quicktok's: the vocabularies ship in its wheel), and the
one that estimates the tokenizers that are not public. A module that imports nothing at its top: the report's
helper process loads an encoding here before it imports anything else (`analysis.helper`), the load (~0.15 s)
being the longest fixed cost of a small report."""
from __future__ import annotations

ESTIMATE_ENCODING = "cl100k_base"  # loads 3x faster than o200k; close to Claude's vocabulary size
# the provider whose tokenizer is public: its records are counted with its own encodings (`tokens.TokenCounter`)
EXACT_PROVIDER = "openai"


def load(name: str):  # noqa: ANN201 - quicktok's Tokenizer (importing it for the annotation would load it)
    """The encoding `name`, loaded once a process (quicktok keeps each one it has loaded)."""
    import quicktok

    return quicktok.get_encoding(name)
