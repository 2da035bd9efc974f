"""`python -m rayfleet.train.ddp`: the job's own command line (the package is the job)."""

import sys

from rayfleet.train.ddp import main

sys.exit(main())
