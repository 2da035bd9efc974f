"""`python -m rayfleet.local up|down|status|env|run|replace-head`: see rayfleet/local/cluster.py."""

import sys

from rayfleet.local.cli import main

sys.exit(main())
