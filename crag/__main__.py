import sys

from crag.cli import main

sys.exit(main())
