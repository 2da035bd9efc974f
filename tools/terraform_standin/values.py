"""The stand-in provider's render mode: what AWS would have answered, made up deterministically.

With TF_STANDIN_MODE=render in Terraform's environment (Terraform hands its environment to the providers
it starts), server.py answers through `Renderer` instead of placeholders, so that a plain
`terraform apply` (no mock_provider) of infra/ completes offline and `terraform show -json` holds a state
that reads like a real deployment's:

* computed attributes are unknown at plan, as a real provider leaves them, except `tags_all`, which the
  real provider computes at plan time too: the provider block's default_tags merged with the resource's
  `tags`;
* at apply every unknown gets a realistic value: ids of the right shape (vpc-0…, subnet-0…, sg-0…,
  ns-…, a KMS key UUID), ARNs built from the resource's name, type, region and account 123456789012 as
  AWS builds them (role/<name>, task-definition/<family>:1, log-group:<name>, secret:<name>-AbCdEf, …),
  names from name_prefix / bucket_prefix with Terraform's 26-digit unique suffix, the ECR repository
  URL, a random_password result of the configured length and character classes. Values derive from a
  hash of the resource type and its configured values (which include the ids of what it depends on), so
  the same configuration renders the same state every time, and two resources of one type that differ in
  any argument get different ids;
* other computed attributes get what the provider reports when AWS has nothing to say: "" / 0 / false /
  empty collections;
* data sources the root module reads are answered as AWS would for that account and region: aws_region,
  aws_availability_zones (the region's zones by name and id), aws_caller_identity, aws_partition and
  aws_ssm_parameter (the ECS-optimized AMI id parameters: an ami-… id). Any other data source is an error
  naming it, never a silent placeholder: in particular aws_iam_policy_document, which the real provider
  computes locally, is not in infra/ (its policies are jsonencode()d in the configuration, so Terraform
  itself renders them); one added there needs its JSON rendering here first.

Nothing here imports the `tf` package: the unknown marker is passed in, so the logic is importable from
the repository's own virtual environment too (tests/infra/test_terraform_render.py).
"""

from __future__ import annotations

import hashlib
import json
import uuid

ACCOUNT = "123456789012"
CREATED = "2025-06-01T00:00:00Z"
# Zones by region (names in order; the zone ids AWS maps them to in account 123456789012 are made up the
# way AWS spells them: use1-az1 …). Regions not listed get a, b, c.
ZONES = {"us-east-1": "abcdef", "us-west-2": "abcd", "eu-west-1": "abc", "eu-central-1": "abc"}
REGION_NAMES = {
    "us-east-1": "US East (N. Virginia)",
    "us-east-2": "US East (Ohio)",
    "us-west-2": "US West (Oregon)",
    "eu-west-1": "Europe (Ireland)",
    "eu-central-1": "Europe (Frankfurt)",
}
_ZONE_ID = {"us-east-1": "use1", "us-west-2": "usw2", "eu-west-1": "euw1", "eu-central-1": "euc1"}  # the endpoints'
S3_HOSTED_ZONES = {"us-east-1": "Z3AQBSTGFYJSTF", "us-west-2": "Z3BJ6K6RIION7M", "eu-west-1": "Z1BKCTXD74EZPE"}
ALPHANUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
RANDOM_SPECIAL = "!@#$%&*()-_=+[]{}<>:?"  # random_password's default special characters


class RenderError(Exception):
    """A request render mode cannot answer faithfully (an unknown data source)."""


def _canonical(value, unknown) -> str:
    def strip(v):
        if v is unknown:
            return None
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [strip(x) for x in v]
        return v

    return json.dumps(strip(value), sort_keys=True, default=str)


class _Seed:
    """Deterministic ids, digits and names from one resource's seed."""

    def __init__(self, seed: str):
        self.seed = seed

    def digest(self, salt: str = "") -> bytes:
        return hashlib.sha256(f"{self.seed}/{salt}".encode()).digest()

    def hex(self, salt: str = "", n: int = 17) -> str:
        return hashlib.sha256(f"{self.seed}/{salt}".encode()).hexdigest()[:n]

    def digits(self, salt: str = "", n: int = 12) -> str:
        return str(int.from_bytes(self.digest(salt), "big"))[-n:].rjust(n, "0")

    def chars(self, alphabet: str, n: int, salt: str = "") -> str:
        out, counter = [], 0
        while len(out) < n:
            for byte in self.digest(f"{salt}/{counter}"):
                out.append(alphabet[byte % len(alphabet)])
            counter += 1
        return "".join(out[:n])

    def uuid(self, salt: str = "") -> str:
        return str(uuid.UUID(bytes=self.digest(salt)[:16], version=4))

    def unique_suffix(self, salt: str = "") -> str:
        """Terraform's id.PrefixedUniqueId suffix: a timestamp and a counter, 26 digits."""
        return "20250601000000" + self.digits(salt, 12)

    def ip(self, salt: str = "") -> str:
        d = self.digest(salt)
        return f"3.{d[0] % 240 + 10}.{d[1]}.{d[2] % 254 + 1}"


def _default(t):
    """What the provider reports for a computed attribute AWS has no value for."""
    if t == "string":
        return ""
    if t == "number":
        return 0
    if t == "bool":
        return False
    if isinstance(t, list) and t[0] in ("list", "set"):
        return []
    if isinstance(t, list) and t[0] == "map":
        return {}
    return None


class Renderer:
    def __init__(self, unknown, account: str = ACCOUNT):
        self.unknown = unknown
        self.account = account
        self.region = "us-east-1"
        self.default_tags: dict = {}
        self._seeds: dict[str, int] = {}

    # -- provider configuration ---------------------------------------------------------------------
    def configure(self, config: dict | None) -> None:
        config = config or {}
        region = config.get("region")
        if isinstance(region, str) and region:
            self.region = region
        blocks = config.get("default_tags") or []
        tags = (blocks[0] or {}).get("tags") if blocks else None
        self.default_tags = dict(tags) if isinstance(tags, dict) else {}

    @property
    def partition(self) -> str:
        if self.region.startswith("cn-"):
            return "aws-cn"
        if self.region.startswith("us-gov-"):
            return "aws-us-gov"
        return "aws"

    @property
    def dns_suffix(self) -> str:
        return "amazonaws.com.cn" if self.partition == "aws-cn" else "amazonaws.com"

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        where = f"{self.region if region else ''}:{self.account if account else ''}"
        return f"arn:{self.partition}:{service}:{where}:{resource}"

    def _known(self, v) -> bool:
        return v is not None and v is not self.unknown

    # -- resources ------------------------------------------------------------------------------------
    def plan(self, type_name: str, proposed: dict | None, prior: dict | None, block: dict) -> dict | None:
        if proposed is None:
            return None
        out = dict(proposed)
        for name, a in block.get("attributes", {}).items():
            if not a.get("computed") or out.get(name) is not None:
                continue
            if prior is not None and prior.get(name) is not None:
                out[name] = prior[name]  # an update keeps what AWS assigned
            else:
                out[name] = self.unknown
        if "tags_all" in block.get("attributes", {}):
            tags = out.get("tags")
            if tags is self.unknown:
                out["tags_all"] = self.unknown
            else:
                out["tags_all"] = {**self.default_tags, **(tags or {})}
        return out

    def apply(self, type_name: str, planned: dict | None, block: dict) -> dict | None:
        if planned is None:
            return None
        seed = self._seed(type_name, planned)
        known = self._resource_values(type_name, planned, seed)
        return self._fill(planned, block, known)

    def _seed(self, type_name: str, values: dict) -> _Seed:
        base = f"{type_name}:{_canonical(values, self.unknown)}"
        n = self._seeds.get(base, 0)
        self._seeds[base] = n + 1
        return _Seed(base if n == 0 else f"{base}#{n}")

    def _fill(self, value: dict, block: dict, known: dict) -> dict:
        out = dict(value)
        for name, a in block.get("attributes", {}).items():
            v = out.get(name)
            if v is self.unknown:
                out[name] = known[name] if name in known else _default(a.get("type"))
            elif "nested_type" in a and v is not None:
                nested = {"attributes": a["nested_type"]["attributes"]}
                out[name] = self._each(v, a["nested_type"]["nesting_mode"], nested)
        for name, nb in block.get("block_types", {}).items():
            v = out.get(name)
            if v is not None and v is not self.unknown:
                out[name] = self._each(v, nb["nesting_mode"], nb["block"])
        return out

    def _each(self, v, nesting: str, block: dict):
        if nesting in ("single", "group"):
            return self._fill(v, block, {})
        if nesting == "map":
            return {k: self._fill(x, block, {}) for k, x in v.items()}
        return [self._fill(x, block, {}) for x in v]

    def _resource_values(self, type_name: str, v: dict, s: _Seed) -> dict:
        """Values for the resource's computed attributes (only the unknown ones are used)."""
        get = lambda name: v.get(name) if self._known(v.get(name)) else None  # noqa: E731
        known: dict = {"owner_id": self.account, "registry_id": self.account, "create_date": CREATED}
        name = get("name")
        if name is None and get("name_prefix") is not None:
            name = get("name_prefix") + s.unique_suffix("name")
            known["name"] = name
        rule = getattr(self, f"_{type_name}", None)
        if rule is not None:
            known.update(rule(v, get, s, name))
        if "id" not in known:
            known["id"] = name if name else s.hex("id", 20)
        if "arn" not in known:
            service = type_name.split("_")[1] if type_name.startswith("aws_") else type_name
            known["arn"] = self.arn(service, f"{type_name.split('_', 2)[-1].replace('_', '-')}/{known['id']}")
        return known

    # network
    def _aws_vpc(self, v, get, s, name):
        vid = f"vpc-0{s.hex('id')[1:]}"
        at = _Seed(vid)
        rtb = f"rtb-0{at.hex('main-route-table')[1:]}"
        return {
            "id": vid,
            "arn": self.arn("ec2", f"vpc/{vid}"),
            "default_security_group_id": f"sg-0{at.hex('default-security-group')[1:]}",
            "default_route_table_id": rtb,
            "main_route_table_id": rtb,
            "default_network_acl_id": f"acl-0{at.hex('default-network-acl')[1:]}",
            "dhcp_options_id": f"dopt-0{at.hex('dhcp-options')[1:]}",
        }

    def _aws_default_security_group(self, v, get, s, name):
        gid = f"sg-0{_Seed(get('vpc_id') or '').hex('default-security-group')[1:]}"
        return {
            "id": gid,
            "arn": self.arn("ec2", f"security-group/{gid}"),
            "name": "default",
            "name_prefix": "",
            "description": "default VPC security group",
        }

    def _ec2(self, kind: str, prefix: str, s: _Seed) -> dict:
        rid = f"{prefix}-0{s.hex('id')[1:]}"
        return {"id": rid, "arn": self.arn("ec2", f"{kind}/{rid}")}

    def _aws_subnet(self, v, get, s, name):
        return self._ec2("subnet", "subnet", s)

    def _aws_security_group(self, v, get, s, name):
        return self._ec2("security-group", "sg", s)

    def _aws_vpc_security_group_ingress_rule(self, v, get, s, name):
        known = self._ec2("security-group-rule", "sgr", s)
        return {**known, "security_group_rule_id": known["id"]}

    _aws_vpc_security_group_egress_rule = _aws_vpc_security_group_ingress_rule

    def _aws_internet_gateway(self, v, get, s, name):
        return self._ec2("internet-gateway", "igw", s)

    def _aws_eip(self, v, get, s, name):
        known = self._ec2("elastic-ip", "eipalloc", s)
        ip = s.ip("public-ip")
        return {
            **known,
            "allocation_id": known["id"],
            "public_ip": ip,
            "public_dns": f"ec2-{ip.replace('.', '-')}.compute-1.amazonaws.com",
        }

    def _aws_nat_gateway(self, v, get, s, name):
        return {
            "id": f"nat-0{s.hex('id')[1:]}",
            "network_interface_id": f"eni-0{s.hex('eni')[1:]}",
            "association_id": f"eipassoc-0{s.hex('association')[1:]}",
            "public_ip": s.ip("public-ip"),
        }

    def _aws_route_table(self, v, get, s, name):
        return self._ec2("route-table", "rtb", s)

    def _aws_route(self, v, get, s, name):
        # The provider's id: "r-" + route table id + a hash code of the destination.
        return {
            "id": f"r-{get('route_table_id')}{s.digits('destination', 10)}",
            "origin": "CreateRoute",
            "state": "active",
        }

    def _aws_route_table_association(self, v, get, s, name):
        return {"id": f"rtbassoc-0{s.hex('id')[1:]}"}

    def _aws_vpc_endpoint(self, v, get, s, name):
        known = self._ec2("vpc-endpoint", "vpce", s)
        if get("vpc_endpoint_type") == "Gateway":
            known["prefix_list_id"] = f"pl-{s.hex('prefix-list', 8)}"
        return {**known, "state": "available"}

    def _aws_flow_log(self, v, get, s, name):
        return self._ec2("vpc-flow-log", "fl", s)

    def _aws_placement_group(self, v, get, s, name):
        return {
            "id": name,
            "arn": self.arn("ec2", f"placement-group/{name}"),
            "placement_group_id": f"pg-0{s.hex('id')[1:]}",
        }

    def _aws_launch_template(self, v, get, s, name):
        known = self._ec2("launch-template", "lt", s)
        return {**known, "latest_version": 1}

    def _aws_autoscaling_group(self, v, get, s, name):
        return {
            "id": name,
            "arn": self.arn("autoscaling", f"autoScalingGroup:{s.uuid('arn')}:autoScalingGroupName/{name}"),
            "predicted_capacity": 0,
            "warm_pool_size": 0,
        }

    # logs, metrics, dashboards
    def _aws_cloudwatch_log_group(self, v, get, s, name):
        return {"id": name, "arn": self.arn("logs", f"log-group:{name}")}

    def _aws_cloudwatch_dashboard(self, v, get, s, name):
        board = get("dashboard_name")
        return {"id": board, "dashboard_arn": self.arn("cloudwatch", f"dashboard/{board}", region=False)}

    def _aws_cloudwatch_metric_alarm(self, v, get, s, name):
        alarm = get("alarm_name")
        return {"id": alarm, "arn": self.arn("cloudwatch", f"alarm:{alarm}")}

    # IAM and KMS
    def _aws_iam_role(self, v, get, s, name):
        path = (get("path") or "/").lstrip("/")
        return {
            "id": name,
            "arn": self.arn("iam", f"role/{path}{name}", region=False),
            "unique_id": "AROA" + s.chars(ALPHANUM[:26] + "234567", 17, "unique"),
        }

    def _aws_iam_instance_profile(self, v, get, s, name):
        path = (get("path") or "/").lstrip("/")
        return {
            "id": name,
            "arn": self.arn("iam", f"instance-profile/{path}{name}", region=False),
            "unique_id": "AIPA" + s.chars(ALPHANUM[:26] + "234567", 17, "unique"),
        }

    def _aws_iam_role_policy(self, v, get, s, name):
        return {"id": f"{get('role')}:{name}"}

    def _aws_iam_role_policy_attachment(self, v, get, s, name):
        return {"id": f"{get('role')}-{s.unique_suffix('id')}"}

    def _aws_kms_key(self, v, get, s, name):
        key = s.uuid("key")
        return {"id": key, "key_id": key, "arn": self.arn("kms", f"key/{key}")}

    def _aws_kms_alias(self, v, get, s, name):
        target = get("target_key_id") or ""
        target_arn = target if target.startswith("arn:") else self.arn("kms", f"key/{target}")
        return {"id": name, "arn": self.arn("kms", name), "target_key_arn": target_arn}

    # storage and registry
    def _aws_s3_bucket(self, v, get, s, name):
        bucket = get("bucket") or (get("bucket_prefix") or "terraform-") + s.unique_suffix("bucket")
        return {
            "id": bucket,
            "bucket": bucket,
            "arn": f"arn:{self.partition}:s3:::{bucket}",
            "bucket_domain_name": f"{bucket}.s3.{self.dns_suffix}",
            "bucket_regional_domain_name": f"{bucket}.s3.{self.region}.{self.dns_suffix}",
            "hosted_zone_id": S3_HOSTED_ZONES.get(self.region, "Z3AQBSTGFYJSTF"),
            "region": self.region,
        }

    def _s3_bucket_child(self, v, get, s, name):
        return {"id": get("bucket")}

    _aws_s3_bucket_public_access_block = _s3_bucket_child
    _aws_s3_bucket_ownership_controls = _s3_bucket_child
    _aws_s3_bucket_server_side_encryption_configuration = _s3_bucket_child
    _aws_s3_bucket_versioning = _s3_bucket_child
    _aws_s3_bucket_lifecycle_configuration = _s3_bucket_child
    _aws_s3_bucket_policy = _s3_bucket_child

    def _aws_ecr_repository(self, v, get, s, name):
        return {
            "id": name,
            "arn": self.arn("ecr", f"repository/{name}"),
            "repository_url": f"{self.account}.dkr.ecr.{self.region}.{self.dns_suffix}/{name}",
        }

    def _aws_ecr_lifecycle_policy(self, v, get, s, name):
        return {"id": get("repository")}

    # ECS and Cloud Map
    def _aws_ecs_cluster(self, v, get, s, name):
        arn = self.arn("ecs", f"cluster/{name}")
        return {"id": arn, "arn": arn}

    def _aws_ecs_capacity_provider(self, v, get, s, name):
        arn = self.arn("ecs", f"capacity-provider/{name}")
        return {"id": arn, "arn": arn}

    def _aws_ecs_cluster_capacity_providers(self, v, get, s, name):
        return {"id": get("cluster_name")}

    def _aws_ecs_task_definition(self, v, get, s, name):
        family = get("family")
        return {
            "id": family,
            "revision": 1,
            "arn": self.arn("ecs", f"task-definition/{family}:1"),
            "arn_without_revision": self.arn("ecs", f"task-definition/{family}"),
        }

    def _aws_ecs_service(self, v, get, s, name):
        cluster = (get("cluster") or "default").rsplit("/", 1)[-1]
        return {"id": self.arn("ecs", f"service/{cluster}/{name}")}

    def _aws_service_discovery_private_dns_namespace(self, v, get, s, name):
        nid = "ns-" + s.chars("abcdefghijklmnopqrstuvwxyz234567", 16, "id")
        return {
            "id": nid,
            "arn": self.arn("servicediscovery", f"namespace/{nid}"),
            "hosted_zone": "Z0" + s.chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 19, "zone"),
        }

    def _aws_service_discovery_service(self, v, get, s, name):
        sid = "srv-" + s.chars("abcdefghijklmnopqrstuvwxyz234567", 16, "id")
        return {"id": sid, "arn": self.arn("servicediscovery", f"service/{sid}")}

    # ElastiCache (the GCS store): endpoints as AWS names them, <role>.<group id>.<6 chars>.<zone id>.cache.<suffix>
    def _aws_elasticache_replication_group(self, v, get, s, name):
        group = get("replication_group_id") or s.hex("id", 12)
        where = f"{s.chars('abcdefghijklmnopqrstuvwxyz0123456789', 6, 'endpoint')}.{_ZONE_ID.get(self.region, 'use1')}"
        count = get("num_cache_clusters") or 1
        return {
            "id": group,
            "arn": self.arn("elasticache", f"replicationgroup:{group}"),
            "primary_endpoint_address": f"master.{group}.{where}.cache.{self.dns_suffix}",
            "reader_endpoint_address": f"replica.{group}.{where}.cache.{self.dns_suffix}",
            "member_clusters": [f"{group}-{n:03d}" for n in range(1, count + 1)],
            "engine_version_actual": f"{get('engine_version') or '8.0'}.0",
        }

    def _aws_elasticache_subnet_group(self, v, get, s, name):
        return {"id": name, "arn": self.arn("elasticache", f"subnetgroup:{name}")}

    # Secrets Manager and random
    def _aws_secretsmanager_secret(self, v, get, s, name):
        arn = self.arn("secretsmanager", f"secret:{name}-{s.chars(ALPHANUM, 6, 'suffix')}")
        return {"id": arn, "arn": arn}

    def _aws_secretsmanager_secret_version(self, v, get, s, name):
        version = s.uuid("version")
        secret = get("secret_id") or ""
        return {"id": f"{secret}|{version}", "arn": secret, "version_id": version, "has_secret_string_wo": False}

    def _aws_secretsmanager_secret_policy(self, v, get, s, name):
        return {"id": get("secret_arn")}

    def _random_password(self, v, get, s, name):
        on = lambda key: get(key) is not False  # noqa: E731  (the random provider's defaults are true)
        alphabet = ""
        alphabet += "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if on("upper") else ""
        alphabet += "abcdefghijklmnopqrstuvwxyz" if on("lower") else ""
        alphabet += "0123456789" if on("numeric") and get("number") is not False else ""
        alphabet += (get("override_special") or RANDOM_SPECIAL) if on("special") else ""
        length = int(get("length") or 0)
        result = s.chars(alphabet or ALPHANUM, length, "result")
        return {"id": "none", "result": result, "bcrypt_hash": "$2a$10$" + s.chars(ALPHANUM + "./", 53, "bcrypt")}

    # -- data sources ------------------------------------------------------------------------------------
    def read_data(self, type_name: str, config: dict | None, block: dict) -> dict:
        config = dict(config or {})
        rule = getattr(self, f"_data_{type_name}", None)
        if rule is None:
            raise RenderError(
                f"render mode does not answer data source {type_name}: add what AWS would return to "
                "tools/terraform_standin/values.py (aws_iam_policy_document needs its JSON rendered "
                "faithfully, as the real provider does locally)"
            )
        known = rule(config)
        out = dict(config)
        for name, a in block.get("attributes", {}).items():
            if out.get(name) is None or out.get(name) is self.unknown:
                if name in known:
                    out[name] = known[name]
                elif a.get("computed"):
                    out[name] = _default(a.get("type"))
        for name in block.get("block_types", {}):
            if out.get(name) is self.unknown:
                out[name] = None
        return out

    def _data_aws_region(self, config):
        region = config.get("name") or config.get("id") or self.region
        return {
            "name": region,
            "id": region,
            "description": REGION_NAMES.get(region, region),
            "endpoint": f"ec2.{region}.{self.dns_suffix}",
        }

    def _data_aws_availability_zones(self, config):
        letters = ZONES.get(self.region, "abc")
        parts = self.region.split("-")
        short = parts[0] + "".join(p[0] for p in parts[1:-1]) + parts[-1]
        zones = [(f"{self.region}{letter}", f"{short}-az{i + 1}") for i, letter in enumerate(letters)]
        excluded_names = set(config.get("exclude_names") or [])
        excluded_ids = set(config.get("exclude_zone_ids") or [])
        zones = [(n, z) for n, z in zones if n not in excluded_names and z not in excluded_ids]
        return {
            "id": self.region,
            "names": [n for n, _ in zones],
            "zone_ids": [z for _, z in zones],
            "group_names": [self.region],
        }

    def _data_aws_caller_identity(self, config):
        return {
            "id": self.account,
            "account_id": self.account,
            "arn": f"arn:{self.partition}:iam::{self.account}:user/rayfleet-deployer",
            "user_id": "AIDA" + _Seed(self.account).chars(ALPHANUM[:26] + "234567", 17, "user"),
        }

    def _data_aws_iam_session_context(self, config):
        """The IAM principal behind an STS ARN, as the provider answers it: an assumed role's role ARN (the real
        provider looks the role's path up with GetRole; render mode's roles have none), anything else as is."""
        arn = config.get("arn") or ""
        parts = arn.split(":", 5)
        if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
            _, role, session = parts[5].split("/", 2)
            issuer = f"arn:{parts[1]}:iam::{parts[4]}:role/{role}"
            return {
                "id": arn,
                "issuer_arn": issuer,
                "issuer_id": "AROA" + _Seed(issuer).chars(ALPHANUM[:26], 17, "role"),
                "issuer_name": role,
                "session_name": session,
            }
        return {"id": arn, "issuer_arn": arn, "issuer_id": "", "issuer_name": "", "session_name": ""}

    def _data_aws_partition(self, config):
        return {
            "id": self.partition,
            "partition": self.partition,
            "dns_suffix": self.dns_suffix,
            "reverse_dns_prefix": ".".join(reversed(self.dns_suffix.split("."))),
        }

    def _data_aws_ssm_parameter(self, config):
        name = config.get("name") or ""
        if "ami" not in name:
            raise RenderError(f"render mode answers only AMI id parameters from SSM, not {name!r}")
        public = name.startswith("/aws/service/")
        value = f"ami-0{_Seed(f'{self.region}{name}').hex('ami')[1:]}"
        return {
            "id": name,
            "arn": self.arn("ssm", f"parameter{name if name.startswith('/') else '/' + name}", account=not public),
            "value": value,
            "insecure_value": value,
            "type": "String",
            "version": 1,
            "with_decryption": True,
        }
