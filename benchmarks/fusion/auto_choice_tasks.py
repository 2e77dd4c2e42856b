"""The small ResNet-18 of ``auto_choice.py``: the built-in ``resnet18_cifar`` workload as a
fusable task over fewer, smaller images (512 of 3 x 16 x 16; the built-in task's own data is
4,096 of 3 x 32 x 32, minutes per study on 2 CPU cores). Workers import it as
``auto_choice_tasks:SMALL_RESNET18`` (the benchmark puts this folder on their path)."""
from hypersack.workloads.synthetic import SyntheticTask
from hypersack.workloads.vision import RESNET18_WORKLOAD

DATA = {"train_size": 512, "val_size": 128, "image_size": 16}
SMALL_RESNET18 = SyntheticTask(RESNET18_WORKLOAD, **DATA)
