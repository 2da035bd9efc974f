"""The control task beside the head: the cluster snapshot, autostop, driver slots, capacity that follows the queue,
suspect workers."""
