"""What every job's loop shares to stay in control of its run: the stop request and the budget, preemption notices,
the hang watch, the compile guard."""
