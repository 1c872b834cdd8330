"""The FNV-1a hashes the protocols partition keys with (32-bit: V1 and the Cursus clients;
64-bit: the Cursus broker's event-sourcing routing)."""

from __future__ import annotations


def fnv1a_32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def fnv1a_64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h
