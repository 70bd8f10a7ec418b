"""humming behind other software's interfaces: an inference engine's quantization-method contract
(:mod:`humming.integrations.engine`). The transformers integration is :mod:`humming.transformers`."""
from humming.integrations.engine import SHARD_IDS, LinearMethod, MoEMethod, can_implement

__all__ = ["SHARD_IDS", "LinearMethod", "MoEMethod", "can_implement"]
