"""Moved to ``hypersack.core.packs`` (``grouping``). Kept only for ``hypersack/fusion/``, which
another branch rewrites and which still imports ``fusibility_key`` from here: remove this file
once ``fusion/`` imports ``hypersack.core.packs``. New code must not import it."""
from hypersack.core.packs.grouping import fusibility_key

__all__ = ["fusibility_key"]
