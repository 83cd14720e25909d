"""The web dashboard served under ``/ui`` (ADR 0030): tasks, their runs drawn as graphs,
live updates and a few actions, for the same principals as the MCP endpoint.

Its template library comes with the ``ui`` extra; :func:`taskloom.server.dashboard.extra.
ui_available` tells whether it is installed, and ``extra.missing_extra_app`` answers in
its place when it is not.
"""
