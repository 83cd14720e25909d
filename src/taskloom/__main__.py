"""``python -m taskloom``: the command line."""

from taskloom.cli import main

main()
