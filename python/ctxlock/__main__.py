"""``python -m ctxlock``: see ``ctxlock._cli``."""

import sys

from ctxlock._cli import main

if __name__ == "__main__":
    sys.exit(main())
