"""Deprecated: the module is now :mod:`evaluation.neighborhoods` (the project spells it "neighbor", as PyTorch,
Annoy and scikit-learn do). This alias keeps old imports working for one release, with a warning."""

import warnings

from evaluation.neighborhoods import *  # noqa: F403

warnings.warn(
    "evaluation.neighbourhoods is renamed evaluation.neighborhoods; import that (this alias goes in the next "
    "release)",
    DeprecationWarning,
    stacklevel=2,
)
