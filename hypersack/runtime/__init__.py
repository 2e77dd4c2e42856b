"""Side effects: the study loop, executors, storage, checkpoints, devices."""
