"""kvprobe: profile and audit prompt-caching costs of AI agents."""
__version__ = "0.1.0"
