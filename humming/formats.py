"""Public module ``humming.formats``: number formats (see :mod:`humming.core.quant.formats`)."""
from humming.core.quant.formats import *  # noqa: F401,F403
from humming.core.quant.formats import __all__  # noqa: F401
