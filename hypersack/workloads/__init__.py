"""Built-in trainables, named in a study as ``trainable: digits_mlp``.

References are strings so that naming a workload never imports torch in the driver.
``FUSED_BUILTINS`` maps a built-in trainable to its fusable task (``hypersack.fusion``), which
``execution: fused | auto`` runs in packs; the task takes the trainable's configs.
"""
BUILTINS: dict[str, str] = {
    "digits_mlp": "hypersack.workloads.digits:train_mlp",
    "digits_cnn": "hypersack.workloads.digits:train_cnn",
    "synthetic_chain": "hypersack.workloads.synthetic:chain",
}

FUSED_BUILTINS: dict[str, str] = {
    "digits_mlp": "hypersack.workloads.digits_fused:DIGITS_MLP",
    "digits_cnn": "hypersack.workloads.digits_fused:DIGITS_CNN",
}

__all__ = ["BUILTINS", "FUSED_BUILTINS"]
