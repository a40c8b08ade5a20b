"""The base every layer stands on: signals and snapshots, durations, TOML positions and
diagnostics, safe patterns, atomic files and the audit log. Imports nothing of guardian."""
