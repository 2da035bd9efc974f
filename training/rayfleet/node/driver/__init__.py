"""A run's driver on a node: a recipe run's driver in the trainer task, and the launchers (torchrun, accelerate) of
launcher recipes."""
