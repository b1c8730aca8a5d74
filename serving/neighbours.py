"""Deprecated: the module is now :mod:`serving.neighbors` (the project spells it "neighbor", as PyTorch,
Annoy and scikit-learn do). This alias keeps old imports working for one release, with a warning."""

import warnings

from serving.neighbors import *  # noqa: F403

warnings.warn(
    "serving.neighbours is renamed serving.neighbors; import that (this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
