"""Which task definitions the rehearsal's agent may run: the ones it rendered, recognised by their content.

The agent runs tasks with podman as the developer, with whatever host paths, devices and capabilities a
definition names. Anything that reaches moto can register a definition and RunTask it with
startedBy=rayfleet, so neither the tag nor the family may decide: a definition is admitted only when it
equals one the rehearsal registered from the rendered picture, field for field (as moto describes both).

One difference is allowed, because `make run IMAGE=...` makes it (rayfleet/ecs/launch.py
`trainer_with_image`): another image for a container of the trainer definition, and only an image this
host already has (the agent never pulls: `--pull=never`), so what runs was built or loaded here.
"""

from __future__ import annotations

from collections.abc import Callable

# What moto (and ECS) adds to a registered definition: it says nothing about what the task may do.
BOOKKEEPING = {
    "taskDefinitionArn",
    "revision",
    "status",
    "registeredAt",
    "registeredBy",
    "deregisteredAt",
    "requiresAttributes",
    "compatibilities",
    "tags",
}
IMAGE_MAY_CHANGE = {"trainer"}


class NotRendered(Exception):
    """A definition the rehearsal did not render; the message says what differs."""


def content(definition: dict, without_images: bool = False) -> dict:
    kept = {k: v for k, v in definition.items() if k not in BOOKKEEPING}
    if without_images:
        kept["containerDefinitions"] = [{**c, "image": None} for c in kept.get("containerDefinitions", [])]
    return kept


def admit(definition: dict, rendered: dict[str, dict], image_here: Callable[[str], bool]) -> str:
    """The rendered definition's key (head, worker, trainer...) that `definition` is; NotRendered otherwise."""
    for key, known in rendered.items():
        if content(definition) == content(known):
            return key
    for key in IMAGE_MAY_CHANGE & rendered.keys():
        if content(definition, without_images=True) == content(rendered[key], without_images=True):
            missing = [c["image"] for c in definition["containerDefinitions"] if not image_here(c["image"])]
            if missing:
                raise NotRendered(f"its image {missing[0]} is not on this host (the rehearsal pulls nothing)")
            return key
    family = definition.get("family", "?")
    near = next((known for known in rendered.values() if known.get("family") == family), None)
    if near is None:
        raise NotRendered(f"family {family} is none of the rendered task definitions")
    changed = sorted(k for k in content(definition).keys() | content(near).keys() if definition.get(k) != near.get(k))
    raise NotRendered(f"{family} differs from the rendered definition in {', '.join(changed)}")
