"""The deployment picture the rehearsal runs: the one place it comes from.

    python -m tools.rehearsal picture [--var-file infra/one-group.tfvars] [--state show.json] > picture.json

The source is Terraform: the state an apply of infra/ leaves, turned into AWS API input shapes by
tools/rendered.py (task definitions exactly as Terraform rendered their container JSON, services,
Cloud Map, bucket, log groups, the token secret, node groups, the root outputs). Which state:

  * by default, Terraform applying infra/ offline with the stand-in providers in render mode
    (tools/terraform_standin/render.py: the pinned Terraform, ~5 s, made up ids and ARNs that the
    rehearsal maps onto what moto assigns); `make setup` installs both;
  * `--state FILE`: a `terraform show -json` document, such as a real deployment's.

A saved picture (`--picture FILE`, the output of `picture`) is taken as it is. Every picture carries "iam" (the
rendered roles, their policies and which task definition runs under which), built by the moto stack's own
tools/moto_stack/iam.py from the same state: the rehearsal's moto enforces it.

The images: a task definition names the ECR repositories (`<account>.dkr.ecr.<region>.amazonaws.com/
rayfleet/<image>:<tag>`) that `make push` fills from the local builds; the rehearsal runs those local
builds, `localhost/rayfleet/<image>:<tag>` (`make build IMAGE_TAG=<tag>`), the same tag.
"""

from __future__ import annotations

import json
from pathlib import Path

from tools import rendered
from tools.moto_stack import iam

ROOT = Path(__file__).resolve().parents[2]
LOCAL_IMAGES = "localhost/rayfleet"
# "iam": the roles, their rendered policies and which role runs what, which the rehearsal's moto enforces
REQUIRED = ("taskDefinitions", "services", "namespace", "bucket", "secrets", "outputs", "repositories", "iam")


class PictureError(ValueError):
    pass


def rendered_picture(var_files: list[str] | tuple = (), image_tag: str = "dev") -> dict:
    """Terraform's offline apply of infra/ (stand-in providers, render mode) as a picture."""
    try:
        from tools.terraform_standin.render import ONE_GROUP, RenderFailed, rendered_state
    except ImportError as exc:  # a checkout without tests/
        raise PictureError(f"cannot render infra/ offline ({exc}); pass --state or --picture") from None
    try:
        # the harness's one group first: a var file given may replace it
        state = rendered_state(var_files=[ONE_GROUP, *var_files], image_tag=image_tag)
    except RenderFailed as exc:
        raise PictureError(f"terraform could not render infra/: {str(exc).splitlines()[0]}") from None
    except (OSError, RuntimeError, SystemExit) as exc:
        raise PictureError(
            f"cannot run the pinned Terraform with the stand-in providers ({exc}); run `make setup`"
        ) from None
    source = "Terraform's offline apply of infra/" + (f" with {', '.join(map(str, var_files))}" if var_files else "")
    return _with_iam(rendered.picture(state, source=f"{source} (stand-in providers, render mode)"), state)


def state_picture(path: Path) -> dict:
    """A `terraform show -json` document (a real deployment's state) as a picture."""
    try:
        state = json.loads(Path(path).read_text())
        return _with_iam(rendered.picture(state, source=f"terraform show -json ({path})"), state)
    except (OSError, json.JSONDecodeError, rendered.NotAPicture, KeyError) as exc:
        raise PictureError(f"{path}: not the state of an applied infra/ ({exc})") from None


def _with_iam(picture: dict, state: dict) -> dict:
    """The picture with "iam", built as the moto stack's own picture builds it (tools/moto_stack/iam.py)."""
    picture["iam"] = iam.picture_iam(state, picture)
    return picture


def load_picture(path: Path) -> dict:
    """A picture saved as JSON (`python -m tools.rehearsal picture > FILE`)."""
    try:
        picture = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PictureError(f"{path}: not a deployment picture ({exc})") from None
    missing = [k for k in REQUIRED if k not in picture]
    if missing:
        again = " (saved before it carried IAM? save it again: python -m tools.rehearsal picture)" * (
            missing == ["iam"]
        )
        raise PictureError(f"{path}: not a deployment picture (no {', '.join(missing)}){again}")
    return picture


def deployment_picture(
    var_files: list[str] | tuple = (), image_tag: str = "dev", state: Path | None = None, saved: Path | None = None
) -> dict:
    """The picture the rehearsal runs, with the images it runs: the one function to change for a new source."""
    if saved is not None:
        picture = load_picture(saved)
    elif state is not None:
        picture = state_picture(state)
    else:
        picture = rendered_picture(var_files, image_tag)
    return with_local_images(picture)


def with_local_images(picture: dict) -> dict:
    """ECR image URIs -> the local builds they are pushed from (same image name and tag)."""
    by_repository = {uri: name for name, uri in (picture.get("repositories") or {}).items()}
    for spec in picture["taskDefinitions"].values():
        for container in spec["containerDefinitions"]:
            repository, _, tag = container["image"].rpartition(":")
            if repository in by_repository:
                container["image"] = f"{LOCAL_IMAGES}/{by_repository[repository]}:{tag}"
    return picture
