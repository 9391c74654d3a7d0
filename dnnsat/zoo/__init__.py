"""Ready-made problems: model families with default spaces, and the synthetic-ResNet reference problem.

Each family is a callable :class:`ZooModel`: ``dnnsat.zoo.gpt(budget=ds.Budget(params="125M"))`` returns a
Problem; ``.space()``, ``.build()`` and ``.network()`` give its parts; ``REGISTRY`` maps names to models
(the CLI's ``zoo:NAME``).
"""

from ._models import cnn, gpt, mlp, mobilenetv2, resnet, transformer
from ._nasbench import arch_str_from_config, config_from_arch_str, nasbench201, nats_sss
from ._registry import REGISTRY, ZooModel, get, problem_from_spec
from ._synthetic import synthetic_resnet_problem, synthetic_resnet_space

__all__ = [
    "REGISTRY",
    "ZooModel",
    "arch_str_from_config",
    "cnn",
    "config_from_arch_str",
    "get",
    "gpt",
    "mlp",
    "mobilenetv2",
    "nasbench201",
    "nats_sss",
    "problem_from_spec",
    "resnet",
    "synthetic_resnet_problem",
    "synthetic_resnet_space",
    "transformer",
]
