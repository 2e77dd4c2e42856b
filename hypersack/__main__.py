"""``python -m hypersack``: the command line (see ``hypersack._entry``)."""
import sys

from hypersack._entry import main

sys.exit(main())
