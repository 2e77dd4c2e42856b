"""The device side: this machine's set-up, NVML, MPS, the state monitor, the inventory, the
profiler (the paper's Sampler) and the job history."""
