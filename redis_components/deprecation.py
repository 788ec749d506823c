"""The deprecation policy's one warning (see CHANGELOG.md): a public form that changes
keeps working for one more release and says, each time it is used, what to use instead.
"""

from __future__ import annotations

import warnings

# The release that removes what is deprecated now.
REMOVED_IN = "0.3"


def deprecated(old: str, instead: str, *, stacklevel: int = 1) -> None:
    """Warn that ``old`` goes in :data:`REMOVED_IN`, and what to do ``instead``.

    ``stacklevel`` counts from the caller of this function, so the default names the
    line that called it; a public function warning about its own use passes 2.
    """
    message = f"{old} is deprecated and goes in {REMOVED_IN}: {instead}"
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)
