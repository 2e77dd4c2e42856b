import sys

from hypersack.cli import main

sys.exit(main())
