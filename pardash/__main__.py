import sys

from pardash.cli import main

sys.exit(main())
