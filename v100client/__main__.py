import sys

from v100client.cli import main

sys.exit(main())
