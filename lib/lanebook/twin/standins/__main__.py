"""`python -m lanebook.twin.standins NAME ARGS...`: what a node's bin/NAME shim runs."""

import sys

from lanebook.twin.standins import main

sys.exit(main())
