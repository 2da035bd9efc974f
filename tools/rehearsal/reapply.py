"""`terraform apply` with other variables, on a running rehearsal: what changes, changed in place.

    python -m tools.rehearsal apply --var-file F     (writes the picture for the running rehearsal to apply)

The running rehearsal applies it between two steps of its agent, as `make deploy` would update a deployment:
the secrets the new variables add (seeded as `make deploy` seeds them), the roles' policies as now rendered
(the keys stay), a new revision of each task definition that changed, the GCS store's stand-in started when
the new picture names a store, the outputs file rewritten (the trainer's revision), and a new deployment of each
service whose task definition changed (ECS replaces its tasks). Not applied: resources other than these (a
new security group stays unmodelled, as all of them), and turning a running store off.

Why: one rehearsal runs the default deployment (no GCS store) first and then the store's, so both are
rehearsed on real raylets for the price of one (tests/integration/test_rehearsal.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from rayfleet.ecs.rotate_token import seed_token
from tools.moto_stack import iam
from tools.moto_stack.stack import mapped
from tools.rehearsal.host import Adaptation
from tools.rehearsal.store import GcsStore, store_of

PENDING = "apply.json"  # in the state directory: the picture the running rehearsal is to apply


def request(state_dir: Path, picture: dict) -> None:
    """Hand `picture` to the rehearsal running from `state_dir` (it picks it up within a step)."""
    tmp = state_dir / (PENDING + ".tmp")
    tmp.write_text(json.dumps(picture))
    tmp.chmod(0o600)
    tmp.replace(state_dir / PENDING)


def pending(state_dir: Path) -> dict | None:
    """The picture waiting to be applied, or None; `taken` removes it once the outcome is in the state file."""
    try:
        return json.loads((state_dir / PENDING).read_text())
    except FileNotFoundError:
        return None


def taken(state_dir: Path) -> None:
    (state_dir / PENDING).unlink(missing_ok=True)


def _new_secrets(moto, old: dict, picture: dict, ids: dict) -> dict[str, str]:
    """The secrets only the new picture has, created and seeded: rendered ARN -> value."""
    client, known, values = moto.client("secretsmanager"), {s["arn"] for s in old["secrets"]}, {}
    for secret in picture["secrets"]:
        if secret["arn"] in known:
            continue
        kwargs = {"Description": secret["description"]} if secret.get("description") else {}
        if secret.get("kmsKeyId"):
            kwargs["KmsKeyId"] = ids.get(secret["kmsKeyId"], secret["kmsKeyId"])
        created = client.create_secret(Name=secret["name"], **kwargs)
        ids[secret["arn"]] = created["ARN"]
        seed_token(client, created["ARN"], say=lambda *_: None)
        values[secret["arn"]] = client.get_secret_value(SecretId=created["ARN"])["SecretString"]
    return values


def apply(rehearsal, picture: dict) -> str:
    """Apply `picture` to the running rehearsal (tools/rehearsal/rehearsal.py's Rehearsal); one line says what
    changed."""
    moto, agent, old = rehearsal.moto, rehearsal.agent, rehearsal.opts.picture
    ids = rehearsal.deployed["ids"]
    values = _new_secrets(moto, old, picture, ids)
    iam.enforce(moto, iam.Spec(**picture["iam"]))  # the roles' policies as now rendered; the keys stay
    ecs, changed = moto.client("ecs"), {}
    for key, spec in picture["taskDefinitions"].items():
        if spec == old["taskDefinitions"].get(key):
            continue
        definition = ecs.register_task_definition(**mapped(spec, ids))["taskDefinition"]
        changed[key] = definition["taskDefinitionArn"]
        ids[picture["taskDefinitionArns"][key]] = definition["taskDefinitionArn"]
        ids[picture["taskDefinitionArns"][key].rsplit("/", 1)[-1]] = f"{definition['family']}:{definition['revision']}"
    store = store_of(picture)
    if store and rehearsal.store is None:  # before the head that needs it
        name, port, bundle_at = store
        token = values.get((picture["outputs"].get("gcs_store") or {}).get("secret_arn"), "")
        state_dir = rehearsal.opts.state_dir
        rehearsal.store = GcsStore(name, port, bundle_at, rehearsal.network["gateway"], token, state_dir / "store")
        agent.stand_in = rehearsal.store
    agent.adaptation = Adaptation.plan(picture, rehearsal.host)
    agent.rendered_arns.update(changed)
    rehearsal.opts.picture = picture
    _rewrite_outputs(Path(rehearsal.deployed["outputs_file"]), mapped(picture["outputs"], ids))
    services = []
    for service in picture["services"]:
        if service["taskDefinition"] in changed:
            ecs.update_service(
                cluster=agent.cluster,
                service=service["serviceName"],
                taskDefinition=changed[service["taskDefinition"]],
                forceNewDeployment=True,  # moto starts no new deployment for a new revision alone; ECS does
            )
            services.append(service["serviceName"])
    line = f"applied {picture.get('source', 'a picture')}: new revisions of {', '.join(sorted(changed)) or 'none'}"
    line += f"; new deployments of {', '.join(services) or 'no service'}"
    return line + ("; " + rehearsal.store.line() if store else "")


def _rewrite_outputs(path: Path, outputs: dict) -> None:
    """The outputs file the verbs read, with the new values (the rehearsal's own ecr_repository_urls stays)."""
    document = json.loads(path.read_text())
    for name, value in outputs.items():
        if name == "ecr_repository_urls":
            continue
        document[name] = {**document.get(name, {"sensitive": False, "type": "string"}), "value": value}
    path.write_text(json.dumps(document, indent=1))
