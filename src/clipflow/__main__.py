import sys

from clipflow.cli import main

sys.exit(main())
