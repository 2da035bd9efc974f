"""The `rayfleet` command: argument parsing only; each verb calls the package that does the work."""
