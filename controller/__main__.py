"""Entry point: python -m controller --run-dir DIR."""

import sys

from controller.app import main

sys.exit(main())
