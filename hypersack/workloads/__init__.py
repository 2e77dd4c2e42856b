"""Built-in trainables, named in a study as ``trainable: digits_mlp``.

References are strings so that naming a workload never imports torch in the driver.
"""
BUILTINS: dict[str, str] = {
    "digits_mlp": "hypersack.workloads.digits:train_mlp",
    "digits_cnn": "hypersack.workloads.digits:train_cnn",
}
