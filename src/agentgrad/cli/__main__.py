import sys

from agentgrad.cli import main

sys.exit(main())
