"""Trace analysis: parse once into deduplicated skeletons, simulate in start order, diagnose, price."""
