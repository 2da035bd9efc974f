"""`python -m rayfleet.train.fsdp`: the job's own command line (the package is the job)."""

import sys

from rayfleet.train.fsdp import main

sys.exit(main())
