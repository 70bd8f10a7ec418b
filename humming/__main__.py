import sys

from humming.cli import main

sys.exit(main())
