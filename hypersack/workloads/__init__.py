"""Built-in trainables, named in a study as ``trainable: digits_mlp``.

GPU-sized workloads on synthetic data (``synthetic``, ``vision``, ``lm``): ``resnet18_cifar``,
``mobilenet_v3_small`` and ``gpt_lm``, each also a fusable task.

References are strings so that naming a workload never imports torch in the driver.
``FUSED_BUILTINS`` maps a built-in trainable to its fusable task (``hypersack.fusion``), which
``execution: fused | auto`` runs in packs; the task takes the trainable's configs.
"""
BUILTINS: dict[str, str] = {
    "digits_mlp": "hypersack.workloads.digits:train_mlp",
    "digits_cnn": "hypersack.workloads.digits:train_cnn",
    "synthetic_chain": "hypersack.workloads.chain:chain",
    "resnet18_cifar": "hypersack.workloads.vision:train_resnet18",
    "mobilenet_v3_small": "hypersack.workloads.vision:train_mobilenet",
    "cifar_classifier": "hypersack.workloads.vision:train_image_model",
    "gpt_lm": "hypersack.workloads.lm:train_gpt",
}

FUSED_BUILTINS: dict[str, str] = {
    "digits_mlp": "hypersack.workloads.digits_fused:DIGITS_MLP",
    "digits_cnn": "hypersack.workloads.digits_fused:DIGITS_CNN",
    "resnet18_cifar": "hypersack.workloads.vision:RESNET18",
    "mobilenet_v3_small": "hypersack.workloads.vision:MOBILENET",
    "gpt_lm": "hypersack.workloads.lm:GPT_LM",
}

__all__ = ["BUILTINS", "FUSED_BUILTINS"]
