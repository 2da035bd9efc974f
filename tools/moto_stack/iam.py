"""IAM in the moto stack: every AWS call a test makes goes out under the identity that makes it on AWS, with
moto's IAM enforcement on and the policies Terraform renders for that deployment.

Identities (`enforce` creates them; each is an `Identity` with its keys and `env()`):
  operator   the IAM user that runs the `rayfleet` verbs on the laptop (`make deploy|run|clean`), named as the
             rendered deployer (aws_iam_session_context). Its policy: infra/operator-policy.json (OPERATOR_POLICY_FILE).
  <role>     every rendered aws_iam_role by name, with its inline and attached policies, as an assumed-role
             session (sts:AssumeRole, asked while enforcement is off: the trust policies name ECS's service
             principal, which a test is not), also by the task definition that runs under it (Spec.role_of:
             "head", "worker", "trainer", "control", "execution"; "task" is the workers': the jobs' role).
  inspector  an allow-all user: the tests' own view of the account (what the AWS console shows its root). A
             test that acts as it says why; MotoServer.inspector is such a client.

moto 5.2 evaluates the Resource of a statement only for S3 (every other service asks about "*") and denies a
statement whose Condition it cannot evaluate (it knows no request context: ecs:cluster, s3:prefix,
kms:ViaService ...). So the policies reach moto through ONE transformation, `for_moto`: every Condition is
dropped, and the Resource of a statement whose actions are not S3's is widened to "*"; S3 statements keep
their real ARNs, so the bucket prefixes are enforced as on AWS. What it removes from the rendered policies is
listed by `removed_by_moto` and pinned by tests/unit/tools/test_moto_stack_iam.py. A Deny statement is only
made stricter by it. Never loosen a rendered policy to satisfy moto: a call denied here is a missing grant.

Not enforced by moto: resource policies (the bucket's, the secrets'), KMS key policies, permission
boundaries, the trust policies (asked while enforcement is off).
"""

from __future__ import annotations

import copy
import json
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools import rendered

INFRA = Path(__file__).resolve().parents[2] / "infra"
# The operator's policy as docs/install.md shows it, generated from the code (python -m tools.operator_policy)
OPERATOR_POLICY_FILE = INFRA / "operator-policy.json"
ALLOW_ALL = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
INSPECTOR = "moto-stack-inspector"
OPERATOR = "rayfleet-deployer"  # the name when the rendering has no deployer identity
KEY_SEED = 54  # moto's random seed before the identities are made: a restarted server gives them the same keys
CREATED_WITH = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}  # any key: enforcement is off


@dataclass(frozen=True)
class Identity:
    name: str
    arn: str
    key: str
    secret: str
    token: str | None = None

    def env(self) -> dict[str, str]:
        """The AWS_* variables that make a process (a verb, a job, the control task's code) this identity."""
        env = {"AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret}
        return {**env, "AWS_SESSION_TOKEN": self.token} if self.token else env

    def client_kwargs(self) -> dict[str, str]:
        kwargs = {"aws_access_key_id": self.key, "aws_secret_access_key": self.secret}
        return {**kwargs, "aws_session_token": self.token} if self.token else kwargs


@dataclass
class Spec:
    """The identities a deployment defines: roles (name -> {arn, trust, policies, attached}), the role that
    runs each task definition, and the operator's user name."""

    roles: dict[str, dict] = field(default_factory=dict)
    role_of: dict[str, str] = field(default_factory=dict)  # "task"/"control"/"execution" -> role name
    operator: str = OPERATOR


def from_state(state: dict, task_definitions: dict | None = None) -> Spec:
    """The rendered roles and their policies (`terraform show -json`), and which role runs what."""
    found = list(rendered.resources(state))
    roles = {
        r["values"]["name"]: {
            "arn": r["values"]["arn"],
            "trust": json.loads(r["values"]["assume_role_policy"]),
            "policies": {},
            "attached": [],
        }
        for r in found
        if r["type"] == "aws_iam_role"
    }
    managed = {r["values"]["arn"]: json.loads(r["values"]["policy"]) for r in found if r["type"] == "aws_iam_policy"}
    for r in found:
        values = r["values"]
        if r["type"] == "aws_iam_role_policy":
            roles[values["role"]]["policies"][values["name"]] = json.loads(values["policy"])
        elif r["type"] == "aws_iam_role_policy_attachment":
            roles[values["role"]]["attached"].append(managed.get(values["policy_arn"], values["policy_arn"]))
    spec = Spec(roles=roles)
    by_arn = {role["arn"]: name for name, role in roles.items()}
    for key, definition in (task_definitions or {}).items():  # head, worker, trainer, control
        spec.role_of[key] = by_arn[definition["taskRoleArn"]]
        spec.role_of["execution"] = by_arn[definition["executionRoleArn"]]
    workers = sorted(k for k in spec.role_of if k.startswith("worker"))  # every worker group runs under one role
    if workers:
        spec.role_of["task"] = spec.role_of[workers[0]]  # the jobs' role: what the ranks run under
    contexts = [r["values"] for r in found if r["type"] == "aws_iam_session_context"]
    deployer = [v.get("issuer_arn") or v["arn"] for v in contexts]
    if deployer and ":user/" in deployer[0]:
        spec.operator = deployer[0].rsplit("/", 1)[-1]
    return spec


def picture_iam(state: dict, picture: dict) -> dict:
    """picture["iam"] for a deployment picture made from `state` (tools/rendered.py): the spec as JSON data,
    what stack.create enforces (stack.default_picture, the rehearsal's picture)."""
    return asdict(from_state(state, picture["taskDefinitions"]))


def role_name(arn: str) -> str:
    """An IAM role's name from its ARN (a task definition's taskRoleArn): the last part of its path."""
    return arn.rsplit("/", 1)[-1]


def operator_policy() -> dict:
    """The operator's policy: the one docs/install.md shows (infra/operator-policy.json)."""
    return json.loads(OPERATOR_POLICY_FILE.read_text())


# -- the one transformation --------------------------------------------------------------------------------------
def _statements(document: dict) -> list[dict]:
    statements = document["Statement"]
    return statements if isinstance(statements, list) else [statements]


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _is_s3(action: str) -> bool:
    return action.lower().startswith("s3:")


# moto names an action by the service's signing name, not its IAM prefix, where the two differ.
SIGNING_NAMES = {"cloudwatch:": "monitoring:"}


def _as_moto_names(actions: list[str]) -> list[str]:
    renamed = [
        name + a[len(prefix) :] for a in actions for prefix, name in SIGNING_NAMES.items() if a.startswith(prefix)
    ]
    return actions + renamed


def for_moto(document: dict) -> dict:
    """The one transformation a rendered policy goes through to reach moto (see the module docstring): every
    Condition dropped; a statement's non-S3 actions get Resource "*" (a statement with both is split in two:
    the S3 actions keep the real ARNs). An action also gets moto's name for it where moto asks by the
    service's signing name (SIGNING_NAMES: cloudwatch:PutMetricData is monitoring:PutMetricData to moto)."""
    out = []
    for statement in _statements(document):
        kept = {k: copy.deepcopy(v) for k, v in statement.items() if k != "Condition"}
        if "Action" not in kept or "Resource" not in kept:  # NotAction / NotResource: as rendered
            out.append(kept)
            continue
        actions = _as_list(kept["Action"])
        s3 = [a for a in actions if _is_s3(a)]
        other = [a for a in actions if not _is_s3(a)]
        if s3:
            out.append({**kept, "Action": s3})
        if other:  # a split statement's second half needs a Sid of its own (a policy's Sids are unique)
            sid = {"Sid": f"{kept['Sid']}NotS3"} if s3 and "Sid" in kept else {}
            out.append({**kept, "Action": _as_moto_names(other), "Resource": "*", **sid})
    return {**document, "Statement": out}


def removed_by_moto(document: dict) -> list[tuple[str, str, object]]:
    """What `for_moto` removes from a policy: (Sid, "Condition", the condition) and (Sid, "Resource", the
    non-S3 resources widened to "*"), in statement order."""
    removed = []
    for n, statement in enumerate(_statements(document)):
        sid = statement.get("Sid", f"#{n}")
        if "Condition" in statement:
            removed.append((sid, "Condition", statement["Condition"]))
        actions = _as_list(statement.get("Action", []))
        resources = [r for r in _as_list(statement.get("Resource", [])) if r != "*"]
        if any(not _is_s3(a) for a in actions) and resources:
            removed.append((sid, "Resource", resources))
    return removed


# -- enforcement in a moto server ---------------------------------------------------------------------------------
def set_enforcement(url: str, on: bool) -> None:
    """moto_server's switch (/moto-api/reset-auth): the number of requests let through before IAM is checked."""
    request = urllib.request.Request(
        f"{url}/moto-api/reset-auth",
        data=b"0" if on else b"inf",
        headers={"Content-Type": "text/plain"},  # a form's body would be parsed away before moto reads it
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).close()


def _client(url: str, service: str):
    import boto3

    return boto3.client(service, endpoint_url=url, region_name="us-east-1", **CREATED_WITH)


def _user(iam, name: str, policy: dict, known: Identity | None) -> Identity:
    try:
        arn = iam.create_user(UserName=name)["User"]["Arn"]
    except iam.exceptions.EntityAlreadyExistsException:
        arn = iam.get_user(UserName=name)["User"]["Arn"]
    iam.put_user_policy(UserName=name, PolicyName="policy", PolicyDocument=json.dumps(for_moto(policy)))
    if known is not None:
        return known
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return Identity(name, arn, key["AccessKeyId"], key["SecretAccessKey"])


def _role(iam, sts, name: str, role: dict, known: Identity | None) -> Identity:
    try:
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(role["trust"]))
    except iam.exceptions.EntityAlreadyExistsException:  # its trust policy stays: sessions are made with it off
        for old in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            iam.delete_role_policy(RoleName=name, PolicyName=old)
    documents = [*role["policies"].items(), *((f"attached-{n}", d) for n, d in enumerate(role["attached"]))]
    for policy_name, document in documents:
        if isinstance(document, str):  # an AWS managed policy's ARN: the deployment attaches none today
            raise ValueError(f"{name}: attached policy {document} is not in the rendered state; moto cannot judge it")
        iam.put_role_policy(RoleName=name, PolicyName=policy_name, PolicyDocument=json.dumps(for_moto(document)))
    if known is not None:
        return known  # an assumed-role session reads the role's policies at every request
    session = sts.assume_role(RoleArn=role["arn"], RoleSessionName=f"moto-stack-{name}")["Credentials"]
    return Identity(name, role["arn"], session["AccessKeyId"], session["SecretAccessKey"], session["SessionToken"])


def enforce(moto, spec: Spec) -> dict[str, Identity]:
    """Create the spec's identities in `moto` (with enforcement off), then turn enforcement on. Again on the
    same server (a second stack, another shape) it updates the roles' policies and keeps the keys. Sets and
    returns moto.identities: operator, inspector, each role by name and by its Spec.role_of alias."""
    set_enforcement(moto.url, on=False)
    iam, sts = _client(moto.url, "iam"), _client(moto.url, "sts")
    known = getattr(moto, "identities", None) or {}
    if not known:  # the same keys on every fresh server (moto's seeded random; s3.py seeds STS's tokens too)
        request = urllib.request.Request(f"{moto.url}/moto-api/seed?a={KEY_SEED}", data=b"", method="POST")
        urllib.request.urlopen(request, timeout=10).close()
    identities = {
        "inspector": _user(iam, INSPECTOR, ALLOW_ALL, known.get("inspector")),
        "operator": _user(iam, spec.operator, operator_policy(), known.get("operator")),
    }
    for name, role in spec.roles.items():
        identities[name] = _role(iam, sts, name, role, known.get(name))
    for alias, name in spec.role_of.items():
        identities[alias] = identities[name]
    moto.identities, moto.iam_spec = identities, spec  # the spec: what a reset of the server makes again
    set_enforcement(moto.url, on=True)
    return identities
