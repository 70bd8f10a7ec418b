"""Public module ``humming.formats``: number formats (see :mod:`humming.core.formats`)."""
from humming.core.formats import *  # noqa: F401,F403
from humming.core.formats import __all__  # noqa: F401
