import sys

from smcdp.cli import main

sys.exit(main())
