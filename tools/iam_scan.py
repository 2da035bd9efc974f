"""What the code asks of AWS, read from the code itself: the boto3 calls of every module (as IAM actions), the
import graph that says which process runs a module (rayfleet/core/process_roles.py), and the S3 key literals
that bypass rayfleet/core/bucket.py. Used by tests/infra/test_iam_grants.py and tools/operator_policy.py.

A call is `<receiver>.<operation>(...)` (or `get_paginator("<operation>")`) whose name is an operation of a
service the code makes a client of (`client("s3")`, `shared_client("ecs", ...)`), per botocore's own service
models; where two such services share a name, the receiver's name decides (`ecr.describe_images`).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from botocore import xform_name
from botocore.session import get_session

from rayfleet.core import bucket, process_roles
from tools.terraform_standin.workspace import REPO

# What ships, by its source root: the two portions of the rayfleet namespace, and the sidecar.
PACKAGES = (("scripts", "rayfleet"), ("training", "rayfleet"), (".", "monitoring"))
# IAM actions that differ from "<service>:<Operation>" (Service Authorization Reference, Amazon S3).
S3_ACTIONS = {
    "ListObjectsV2": ["s3:ListBucket"],
    "ListObjects": ["s3:ListBucket"],
    "HeadObject": ["s3:GetObject"],
    "HeadBucket": ["s3:ListBucket"],
    "DeleteObjects": ["s3:DeleteObject"],
    "ListObjectVersions": ["s3:ListBucketVersions"],
    "CopyObject": ["s3:GetObject", "s3:PutObject"],
}
# boto3's transfer methods (not API operations): what they call. A multipart upload's Create/Upload/Complete
# are authorized as s3:PutObject; its abort (on a failure) is left to the bucket's lifecycle rule.
TRANSFERS = {
    "upload_file": ["s3:PutObject"],
    "upload_fileobj": ["s3:PutObject"],
    "download_file": ["s3:GetObject"],
    "download_fileobj": ["s3:GetObject"],
}
# What an action needs besides itself (Service Authorization Reference: RunTask's dependent actions).
IMPLIED = {"ecs:RunTask": ["iam:PassRole", "ecs:TagResource"]}
IAM_PREFIX = {"service-quotas": "servicequotas"}


def modules() -> dict[str, Path]:
    found = {}
    for root, package in PACKAGES:
        folder = REPO / root / package
        if not folder.is_dir():  # a scan of nothing would find every grant unused and no call ungranted
            raise FileNotFoundError(f"{folder}: a package the IAM scan reads is not there")
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(REPO / root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def imports(module: str, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `module` imports, at module level or inside a function."""
    out = set()
    for node in ast.walk(_tree(known[module])):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return {m for m in out if m in known}


def closure(entries: list[str], known: dict[str, Path]) -> set[str]:
    seen, todo = set(), list(entries)
    while todo:
        module = todo.pop()
        if module not in seen and module in known:
            seen.add(module)
            todo += imports(module, known)
    return seen


def entry_points(known: dict[str, Path]) -> dict[str, set[str]]:
    """role -> its processes' entry modules: the control task's, the `rayfleet` command's, and every other
    module of the image side that runs as a program (ray_node, driver, the jobs, the sidecar)."""
    mains = {m for m, p in known.items() if "__name__ == " in p.read_text() or m == "monitoring.__main__"}
    task = {m for m in mains if process_roles.package_role(m) == bucket.TASK and m != process_roles.CONTROL_ENTRY}
    return {
        bucket.OPERATOR: {process_roles.OPERATOR_ENTRY},
        bucket.CONTROL: {process_roles.CONTROL_ENTRY},
        bucket.TASK: task,
    }


def roles_of(known: dict[str, Path]) -> dict[str, frozenset[str]]:
    """module -> the roles whose AWS identity makes its calls."""
    reach = {role: closure(sorted(entries), known) for role, entries in entry_points(known).items()}
    out = {}
    for module in known:
        role = process_roles.package_role(module)
        declared = process_roles.CALLS_OF_MODULE.get(module)
        out[module] = declared or (frozenset({role}) if role else frozenset(r for r in reach if module in reach[r]))
    return out


@cache
def _operations() -> dict[str, list[tuple[str, str]]]:
    """operation's python name -> [(client service name, Operation)] for the services the code makes clients of."""
    code = "\n".join(p.read_text() for p in modules().values())
    session, ops = get_session(), {}
    for service in sorted(set(re.findall(r"client\(\s*\"([a-z0-9-]+)\"", code))):
        for op in session.get_service_model(service).operation_names:
            ops.setdefault(xform_name(op), []).append((service, op))
    return ops


def actions_of(service: str, op: str) -> list[str]:
    prefix = IAM_PREFIX.get(service, service)
    found = S3_ACTIONS.get(op, [f"s3:{op}"]) if service == "s3" else [f"{prefix}:{op}"]
    return found + [a for f in found for a in IMPLIED.get(f, [])]


def calls(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, the call as written, its IAM actions) for every AWS call in one file."""
    ops, out = _operations(), []
    services = {s for pairs in ops.values() for s, _ in pairs}
    for node in ast.walk(_tree(path)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, receiver = node.func.attr, ast.unparse(node.func.value)
        if name in ("get_paginator", "get_waiter") and node.args and isinstance(node.args[0], ast.Constant):
            name = node.args[0].value
        if name in TRANSFERS:
            out.append((node.lineno, f"{receiver}.{name}", TRANSFERS[name]))
            continue
        named = {s for s in services if re.search(rf"\b{re.escape(s)}\b", receiver.replace("_", " "))}
        candidates = [(s, op) for s, op in ops.get(name, []) if not named or s in named]
        if len(candidates) == 1:
            out.append((node.lineno, f"{receiver}.{name}", actions_of(*candidates[0])))
    return out


def actions_by_role() -> dict[str, dict[str, list[str]]]:
    """role -> action -> where the code makes it ("module:line")."""
    known = modules()
    roles = roles_of(known)
    out: dict[str, dict[str, list[str]]] = {r: {} for r in bucket.ROLES}
    for module, path in known.items():
        for line, _, actions in calls(path):
            for role in roles[module]:
                for action in actions:
                    out[role].setdefault(action, []).append(f"{module}:{line}")
    return out


def bucket_key_literals() -> list[tuple[str, int, str]]:
    """(file, line, literal) of every string in rayfleet/ outside bucket.py that spells a bucket key or folder
    of the layout where code builds keys from it: a module-level constant, a part of an f-string or a `+`,
    or a Key=/Prefix= argument. Dict keys, subscripts, argparse names and Path joins (`/ "cluster"`, local
    folders) are not keys of the bucket."""
    names = {part for p in bucket.LAYOUT for part in p.key.strip("/").split("/")}
    pattern = re.compile(rf"^/?({'|'.join(map(re.escape, sorted(names)))})(/|$)")
    found = []
    for module, path in modules().items():
        if module == "rayfleet.core.bucket" or not module.startswith("rayfleet"):
            continue
        tree = _tree(path)
        suspects = [n.value for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign) and n.value]
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                suspects += node.values
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                suspects += [node.left, node.right]
            elif isinstance(node, ast.Call):
                suspects += [k.value for k in node.keywords if k.arg in ("Key", "Prefix")]
        for node in suspects:
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.match(node.value):
                found.append((path.relative_to(REPO).as_posix(), node.lineno, node.value))
    return sorted(set(found))
