"""Public module ``humming.schemes``: quantization schemes and presets (see :mod:`humming.core.quant.schemes`).

``humming.schemes.get(name)`` returns a preset (or parses a string made by ``str(scheme)``);
``humming.schemes.names()`` lists the presets.
"""
from humming.core.quant.schemes import *  # noqa: F401,F403
from humming.core.quant.schemes import __all__  # noqa: F401
