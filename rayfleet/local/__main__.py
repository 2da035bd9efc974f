"""`python -m rayfleet.local up|down|status|env|run`: see rayfleet/local/cluster.py."""

import sys

from rayfleet.local.cluster import main

sys.exit(main())
