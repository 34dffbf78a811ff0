"""`python -m services.cli`: how the stack's own processes start commands (no installed script needed)."""

import sys

from services.cli.app import main

sys.exit(main())
