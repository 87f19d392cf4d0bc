"""Test that agent code keeps its prompt cache: record the model calls of a block of code and assert on
kvprobe's analysis of them. The pytest plugin's `kvprobe_cache` fixture is a `CacheRecording`."""
from kvprobe.testing.recording import UNSTABLE_KINDS, CacheAssertionError, CacheRecording

__all__ = ["CacheAssertionError", "CacheRecording", "UNSTABLE_KINDS"]
