"""A module for the docs' commands to scan (``taskloom run repo_audit``)."""


def count(items: list[str]) -> int:
    """How many items there are."""
    return len(items)
