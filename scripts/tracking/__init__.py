"""Laptop verbs that look at runs' curves: `make plot` (a PNG, no server) and `make tensorboard`."""
