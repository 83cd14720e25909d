"""Which language a file is written in, from its name alone (no content sniffing)."""

from pathlib import PurePosixPath
from typing import Final

OTHER: Final = "Other"
BINARY: Final = "Binary"
"""What repo_audit calls a binary file whose name says no language."""

_BY_NAME: Final = {
    "makefile": "Makefile",
    "gnumakefile": "Makefile",
    "dockerfile": "Dockerfile",
    "containerfile": "Dockerfile",
    "cmakelists.txt": "CMake",
    "justfile": "Just",
}

_BY_SUFFIX: Final = {
    ".py": "Python",
    ".pyi": "Python",
    ".pyx": "Cython",
    ".ipynb": "Jupyter Notebook",
    ".js": "JavaScript",
    ".mjs": "JavaScript",
    ".cjs": "JavaScript",
    ".jsx": "JavaScript",
    ".ts": "TypeScript",
    ".tsx": "TypeScript",
    ".go": "Go",
    ".rs": "Rust",
    ".c": "C",
    ".h": "C",
    ".cc": "C++",
    ".cpp": "C++",
    ".cxx": "C++",
    ".hpp": "C++",
    ".hh": "C++",
    ".java": "Java",
    ".kt": "Kotlin",
    ".kts": "Kotlin",
    ".scala": "Scala",
    ".swift": "Swift",
    ".m": "Objective-C",
    ".cs": "C#",
    ".fs": "F#",
    ".rb": "Ruby",
    ".php": "PHP",
    ".pl": "Perl",
    ".lua": "Lua",
    ".r": "R",
    ".jl": "Julia",
    ".hs": "Haskell",
    ".ml": "OCaml",
    ".ex": "Elixir",
    ".exs": "Elixir",
    ".erl": "Erlang",
    ".clj": "Clojure",
    ".dart": "Dart",
    ".zig": "Zig",
    ".sh": "Shell",
    ".bash": "Shell",
    ".zsh": "Shell",
    ".fish": "Shell",
    ".ps1": "PowerShell",
    ".bat": "Batch",
    ".sql": "SQL",
    ".html": "HTML",
    ".htm": "HTML",
    ".css": "CSS",
    ".scss": "SCSS",
    ".sass": "Sass",
    ".less": "Less",
    ".vue": "Vue",
    ".svelte": "Svelte",
    ".md": "Markdown",
    ".markdown": "Markdown",
    ".rst": "reStructuredText",
    ".txt": "Text",
    ".json": "JSON",
    ".jsonl": "JSON",
    ".yaml": "YAML",
    ".yml": "YAML",
    ".toml": "TOML",
    ".ini": "INI",
    ".cfg": "INI",
    ".xml": "XML",
    ".csv": "CSV",
    ".proto": "Protocol Buffers",
    ".tf": "HCL",
    ".nix": "Nix",
}


def language_of(path: str) -> str:
    """The language of the file at the POSIX *path*, by file name or suffix; else "Other"."""
    name = PurePosixPath(path).name.lower()
    return _BY_NAME.get(name) or _BY_SUFFIX.get(PurePosixPath(name).suffix, OTHER)
