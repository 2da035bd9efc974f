"""The ECR lifecycle never expires the image a service runs (issue 15 item 15).

`make deploy` (and `make push` of the deployed tag) tags the running images `deployed-<tag>` and keeps at most
DEPLOYED_KEPT images per repository so marked (rayfleet/ops/images.py mark_deployed, exercised against moto
in tests/integration/test_deploy_infra_verbs.py). The registry module's rule 1 selects exactly that prefix
and keeps exactly that many, so it expires none of them; and an image that a higher-priority rule selects
cannot be expired by a lower-priority one (Amazon ECR User Guide, "Lifecycle policy evaluation rules"), so
rules 2 and 3 cannot either. The rendered rules themselves are asserted by infra/tests/data_plane.tftest.hcl.
"""

from __future__ import annotations

from rayfleet.ops.images import DEPLOYED_KEPT, DEPLOYED_PREFIX
from tests.infra.hcl import MODULES, load_dir, merged

REGISTRY = merged(load_dir(MODULES / "registry"), "locals")


def test_the_lifecycle_keeps_as_many_marked_images_as_deploy_ever_marks():
    assert REGISTRY["keep_deployed"] == DEPLOYED_KEPT
    assert REGISTRY["deployed_prefix"] == DEPLOYED_PREFIX
