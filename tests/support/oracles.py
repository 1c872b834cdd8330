"""Independent re-implementations the tests check the product against (not imported from src)."""

from __future__ import annotations


def fnv1a_32(data: bytes) -> int:
    h = 2166136261
    for byte in data:
        h ^= byte
        h = (h * 16777619) % 2**32
    return h


def fnv1a_64(data: bytes) -> int:
    h = 14695981039346656037
    for byte in data:
        h ^= byte
        h = (h * 1099511628211) % 2**64
    return h
