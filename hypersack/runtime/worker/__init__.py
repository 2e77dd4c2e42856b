"""The worker side: worker processes, their start-up, the trial context, the driver <-> worker
messages, a trial's checkpoints and the trainable's resolution."""
