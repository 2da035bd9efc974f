"""`python -m scripts.local_cluster up|down|status|env|run`: see scripts/local_cluster/cluster.py."""

import sys

from scripts.local_cluster.cluster import main

sys.exit(main())
