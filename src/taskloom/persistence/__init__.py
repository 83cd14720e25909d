"""Adapters that implement the engine's ports: an in-memory store and SQLite."""
