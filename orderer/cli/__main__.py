"""``python -m orderer.cli``: the ``evb`` command (the tests and ``evb demo`` start the server
this way, with the interpreter they run under)."""

import sys

from orderer.cli import main

sys.exit(main())
