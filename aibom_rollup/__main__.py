import sys

from aibom_rollup.cli import main

sys.exit(main())
