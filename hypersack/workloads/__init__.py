"""Built-in trainables, named in a study as ``trainable: digits_mlp``.

GPU-sized workloads on synthetic data (``synthetic``, ``vision``, ``lm``): ``resnet18_cifar``,
``mobilenet_v3_small`` and ``gpt_lm``, each also a fusable task.

References are strings so that naming a workload never imports torch in the driver.
``FUSED_BUILTINS`` maps a built-in trainable to its fusable task (``hypersack.fusion``), which
``execution: fused | auto`` runs in packs; the task takes the trainable's configs.

A study's ``precision`` (fp32 | bf16 | fp16) reaches its packs and, through ``at_precision``, the
plain trials of the built-ins in ``PRECISION_BUILTINS`` (their ``train(config, ctx, precision)``),
so a plain trial and a pack compare at one precision. A trainable of your own keeps its own.
"""
from typing import Any
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

_IMAGE_KEYS = ("width", "train_size", "val_size", "image_size", "channels", "classes", "data")

#: Each fusable built-in's ``architecture_keys`` (the config keys that change its tensor
#: shapes), known without importing torch: ``execution: auto`` reads them in the driver to find
#: a model's kept fusion probe. ``tests/workloads`` checks them against the tasks.
FUSED_BUILTIN_KEYS: dict[str, tuple[str, ...]] = {
    "digits_mlp": ("hidden",),
    "digits_cnn": ("channels", "hidden"),
    "resnet18_cifar": _IMAGE_KEYS,
    "mobilenet_v3_small": _IMAGE_KEYS,
    "gpt_lm": ("width", "layers", "heads", "train_size", "val_size", "seq_len", "vocab", "data"),
}

#: Built-ins whose ``train(config, ctx, precision="fp32")`` trains at a study's precision.
PRECISION_BUILTINS = frozenset({"digits_mlp", "digits_cnn", "resnet18_cifar",
                                "mobilenet_v3_small", "cifar_classifier", "gpt_lm"})


class BuiltinAtPrecision:
    """``train(config, ctx)`` of the built-in ``name`` at ``precision`` (picklable: a worker
    imports the built-in itself, as it would from its name)."""

    def __init__(self, name: str, precision: str):
        self.name, self.precision = name, precision

    def __call__(self, config: Any, ctx: Any) -> None:
        import importlib
        module, _, attr = BUILTINS[self.name].partition(":")
        getattr(importlib.import_module(module), attr)(config, ctx, precision=self.precision)

    def __repr__(self) -> str:
        return f"{self.name} at {self.precision}"


def at_precision(trainable: Any, precision: str) -> Any:
    """The plain trainable to run at the study's ``precision``: a built-in of
    ``PRECISION_BUILTINS`` named by a string gets it; anything else is returned as it is (in
    fp32, always as it is)."""
    if precision == "fp32" or not isinstance(trainable, str):
        return trainable
    name = trainable.removeprefix("builtin:")
    return BuiltinAtPrecision(name, precision) if name in PRECISION_BUILTINS else trainable


__all__ = ["BUILTINS", "FUSED_BUILTINS", "FUSED_BUILTIN_KEYS", "PRECISION_BUILTINS", "BuiltinAtPrecision",
           "at_precision"]
