"""The operator's IAM policy: what `make deploy`, `make run` and `make clean` need of the operator's own
credentials, generated, never hand-kept.

    python -m tools.operator_policy > infra/operator-policy.json

Two parts. The `rayfleet` command's own calls: every boto3 call of the operator's modules
(tools/iam_scan.py, the roles of rayfleet/core/process_roles.py), and what the AWS CLI calls for the verbs that
become it (`CLI_ACTIONS`). Terraform's: for each resource type in
Terraform's rendered state of infra/ (RENDERINGS), the calls the AWS provider
makes to create, read, update and delete it (TERRAFORM_ACTIONS, from the provider's resource
implementations, named as the Service Authorization Reference spells them). tests/infra/test_iam_grants.py
checks the committed file equals this output and that every rendered type is mapped. Resources are "*": the
bucket's and secrets' names carry suffixes only AWS knows before the first apply.
"""

from __future__ import annotations

import json
import sys

from rayfleet.core import bucket
from rayfleet.ecs import shell
from rayfleet.ops import dashboard
from tools import iam_scan

# The verbs that become the AWS CLI (rayfleet exec, rayfleet dashboard): what the CLI calls for them.
CLI_ACTIONS = (*shell.CLI_ACTIONS, *dashboard.CLI_ACTIONS)

_CRUD_TAGS = ["TagResource", "UntagResource", "ListTagsForResource"]


def _svc(service: str, *ops: str) -> list[str]:
    return [f"{service}:{op}" for op in ops]


TERRAFORM_ACTIONS: dict[str, list[str]] = {
    "aws_availability_zones": _svc("ec2", "DescribeAvailabilityZones"),
    "aws_caller_identity": _svc("sts", "GetCallerIdentity"),
    "aws_iam_session_context": _svc("iam", "GetRole"),
    "aws_partition": [],
    "aws_region": [],
    "aws_ssm_parameter": _svc("ssm", "GetParameter"),
    "aws_autoscaling_group": _svc(
        "autoscaling",
        "CreateAutoScalingGroup",
        "UpdateAutoScalingGroup",
        "DeleteAutoScalingGroup",
        "DescribeAutoScalingGroups",
        "DescribeScalingActivities",
        "CreateOrUpdateTags",
        "DeleteTags",
        "SetInstanceProtection",
    )
    + _svc("ec2", "RunInstances", "CreateTags", "DescribeLaunchTemplateVersions"),
    "aws_cloudwatch_dashboard": _svc("cloudwatch", "PutDashboard", "GetDashboard", "DeleteDashboards"),
    "aws_cloudwatch_event_rule": _svc(
        "events", "PutRule", "DescribeRule", "DeleteRule", "ListTagsForResource", "TagResource"
    ),
    "aws_cloudwatch_event_target": _svc("events", "PutTargets", "ListTargetsByRule", "RemoveTargets"),
    "aws_cloudwatch_log_group": _svc(
        "logs",
        "CreateLogGroup",
        "DescribeLogGroups",
        "DeleteLogGroup",
        "PutRetentionPolicy",
        "AssociateKmsKey",
        "ListTagsForResource",
        "TagResource",
    ),
    "aws_cloudwatch_metric_alarm": _svc(
        "cloudwatch", "PutMetricAlarm", "DescribeAlarms", "DeleteAlarms", "ListTagsForResource", "TagResource"
    ),
    "aws_default_security_group": _svc(
        "ec2", "DescribeSecurityGroups", "RevokeSecurityGroupIngress", "RevokeSecurityGroupEgress", "CreateTags"
    ),
    "aws_ecr_lifecycle_policy": _svc("ecr", "PutLifecyclePolicy", "GetLifecyclePolicy", "DeleteLifecyclePolicy"),
    "aws_ecr_repository": _svc(
        "ecr", "CreateRepository", "DescribeRepositories", "DeleteRepository", "ListTagsForResource", "TagResource"
    ),
    "aws_ecs_capacity_provider": _svc(
        "ecs",
        "CreateCapacityProvider",
        "DescribeCapacityProviders",
        "UpdateCapacityProvider",
        "DeleteCapacityProvider",
        "TagResource",
    ),
    "aws_elasticache_replication_group": _svc(
        "elasticache",
        "CreateReplicationGroup",
        "DescribeReplicationGroups",
        "DescribeCacheClusters",
        "ModifyReplicationGroup",
        "DeleteReplicationGroup",
        "AddTagsToResource",
        "ListTagsForResource",
        "RemoveTagsFromResource",
    ),
    "aws_elasticache_subnet_group": _svc(
        "elasticache",
        "CreateCacheSubnetGroup",
        "DescribeCacheSubnetGroups",
        "ModifyCacheSubnetGroup",
        "DeleteCacheSubnetGroup",
        "AddTagsToResource",
        "ListTagsForResource",
    ),
    "aws_ecs_cluster": _svc(
        "ecs", "CreateCluster", "DescribeClusters", "UpdateCluster", "DeleteCluster", "TagResource"
    ),
    "aws_ecs_cluster_capacity_providers": _svc("ecs", "PutClusterCapacityProviders", "DescribeClusters"),
    "aws_ecs_service": _svc(
        "ecs", "CreateService", "DescribeServices", "UpdateService", "DeleteService", "TagResource"
    ),
    "aws_ecs_task_definition": _svc(
        "ecs", "RegisterTaskDefinition", "DescribeTaskDefinition", "DeregisterTaskDefinition", "TagResource"
    ),
    "aws_eip": _svc("ec2", "AllocateAddress", "DescribeAddresses", "ReleaseAddress", "CreateTags"),
    "aws_flow_log": _svc("ec2", "CreateFlowLogs", "DescribeFlowLogs", "DeleteFlowLogs", "CreateTags"),
    "aws_iam_instance_profile": _svc(
        "iam",
        "CreateInstanceProfile",
        "GetInstanceProfile",
        "DeleteInstanceProfile",
        "AddRoleToInstanceProfile",
        "RemoveRoleFromInstanceProfile",
        "TagInstanceProfile",
        "PassRole",
    ),
    "aws_iam_role": _svc(
        "iam",
        "CreateRole",
        "GetRole",
        "DeleteRole",
        "UpdateAssumeRolePolicy",
        "TagRole",
        "ListRolePolicies",
        "ListAttachedRolePolicies",
        "ListInstanceProfilesForRole",
        "PassRole",
    ),
    "aws_iam_role_policy": _svc("iam", "PutRolePolicy", "GetRolePolicy", "DeleteRolePolicy"),
    "aws_iam_service_linked_role": _svc("iam", "CreateServiceLinkedRole", "GetRole", "DeleteServiceLinkedRole"),
    "aws_internet_gateway": _svc(
        "ec2",
        "CreateInternetGateway",
        "AttachInternetGateway",
        "DetachInternetGateway",
        "DeleteInternetGateway",
        "DescribeInternetGateways",
        "CreateTags",
    ),
    "aws_kms_alias": _svc("kms", "CreateAlias", "ListAliases", "DeleteAlias", "UpdateAlias"),
    "aws_kms_key": _svc(
        "kms",
        "CreateKey",
        "DescribeKey",
        "GetKeyPolicy",
        "PutKeyPolicy",
        "GetKeyRotationStatus",
        "EnableKeyRotation",
        "ScheduleKeyDeletion",
        "ListResourceTags",
        "TagResource",
        "CreateGrant",
        "Decrypt",
        "GenerateDataKey",
    ),
    "aws_launch_template": _svc(
        "ec2",
        "CreateLaunchTemplate",
        "CreateLaunchTemplateVersion",
        "ModifyLaunchTemplate",
        "DescribeLaunchTemplates",
        "DescribeLaunchTemplateVersions",
        "DeleteLaunchTemplate",
        "CreateTags",
    ),
    "aws_nat_gateway": _svc("ec2", "CreateNatGateway", "DescribeNatGateways", "DeleteNatGateway", "CreateTags"),
    "aws_placement_group": _svc(
        "ec2", "CreatePlacementGroup", "DescribePlacementGroups", "DeletePlacementGroup", "CreateTags"
    ),
    "aws_route": _svc("ec2", "CreateRoute", "DeleteRoute", "DescribeRouteTables"),
    "aws_route_table": _svc("ec2", "CreateRouteTable", "DescribeRouteTables", "DeleteRouteTable", "CreateTags"),
    "aws_route_table_association": _svc("ec2", "AssociateRouteTable", "DisassociateRouteTable", "DescribeRouteTables"),
    "aws_s3_bucket": _svc(
        "s3",
        "CreateBucket",
        "ListBucket",
        "DeleteBucket",
        "GetBucketTagging",
        "PutBucketTagging",
        "GetBucketAcl",
        "GetBucketCORS",
        "GetBucketWebsite",
        "GetBucketLogging",
        "GetAccelerateConfiguration",
        "GetBucketRequestPayment",
        "GetReplicationConfiguration",
        "GetBucketObjectLockConfiguration",
        "GetLifecycleConfiguration",
        "GetEncryptionConfiguration",
        "GetBucketVersioning",
        "GetBucketPolicy",
    ),
    "aws_s3_bucket_lifecycle_configuration": _svc("s3", "PutLifecycleConfiguration", "GetLifecycleConfiguration"),
    "aws_s3_bucket_ownership_controls": _svc("s3", "PutBucketOwnershipControls", "GetBucketOwnershipControls"),
    "aws_s3_bucket_policy": _svc("s3", "PutBucketPolicy", "GetBucketPolicy", "DeleteBucketPolicy"),
    "aws_s3_bucket_public_access_block": _svc("s3", "PutBucketPublicAccessBlock", "GetBucketPublicAccessBlock"),
    "aws_s3_bucket_server_side_encryption_configuration": _svc(
        "s3", "PutEncryptionConfiguration", "GetEncryptionConfiguration"
    ),
    "aws_s3_bucket_versioning": _svc("s3", "PutBucketVersioning", "GetBucketVersioning"),
    "aws_secretsmanager_secret": _svc(
        "secretsmanager",
        "CreateSecret",
        "DescribeSecret",
        "DeleteSecret",
        "GetResourcePolicy",
        "TagResource",
        "UpdateSecret",
    ),
    "aws_secretsmanager_secret_policy": _svc(
        "secretsmanager", "PutResourcePolicy", "GetResourcePolicy", "DeleteResourcePolicy"
    ),
    "aws_security_group": _svc(
        "ec2",
        "CreateSecurityGroup",
        "DescribeSecurityGroups",
        "DeleteSecurityGroup",
        "RevokeSecurityGroupEgress",
        "CreateTags",
    ),
    "aws_service_discovery_private_dns_namespace": _svc(
        "servicediscovery",
        "CreatePrivateDnsNamespace",
        "GetNamespace",
        "DeleteNamespace",
        "GetOperation",
        "TagResource",
        "ListTagsForResource",
    )
    + _svc("route53", "CreateHostedZone", "DeleteHostedZone", "GetHostedZone", "ChangeResourceRecordSets")
    + _svc("ec2", "DescribeVpcs"),
    "aws_service_discovery_service": _svc(
        "servicediscovery",
        "CreateService",
        "GetService",
        "DeleteService",
        "UpdateService",
        "TagResource",
        "ListTagsForResource",
    ),
    "aws_sns_topic": _svc(
        "sns",
        "CreateTopic",
        "GetTopicAttributes",
        "SetTopicAttributes",
        "DeleteTopic",
        "ListTagsForResource",
        "TagResource",
    ),
    "aws_sns_topic_policy": _svc("sns", "SetTopicAttributes", "GetTopicAttributes"),
    "aws_subnet": _svc("ec2", "CreateSubnet", "DescribeSubnets", "DeleteSubnet", "ModifySubnetAttribute", "CreateTags"),
    "aws_vpc": _svc(
        "ec2", "CreateVpc", "DescribeVpcs", "DescribeVpcAttribute", "ModifyVpcAttribute", "DeleteVpc", "CreateTags"
    ),
    "aws_vpc_endpoint": _svc(
        "ec2",
        "CreateVpcEndpoint",
        "DescribeVpcEndpoints",
        "ModifyVpcEndpoint",
        "DeleteVpcEndpoints",
        "DescribePrefixLists",
        "CreateTags",
    ),
    "aws_sns_topic_subscription": _svc(
        "sns", "Subscribe", "Unsubscribe", "GetSubscriptionAttributes", "SetSubscriptionAttributes"
    ),
    "aws_vpc_security_group_egress_rule": _svc(
        "ec2", "AuthorizeSecurityGroupEgress", "RevokeSecurityGroupEgress", "DescribeSecurityGroupRules"
    ),
    "aws_vpc_security_group_ingress_rule": _svc(
        "ec2", "AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress", "DescribeSecurityGroupRules"
    ),
}
# The deployments rendered: the default (its fsdp group has EFA and a placement group), one group with Spot
# types, and the default with every optional part on (the GCS store, e-mail notifications), so the policy covers
# what a deployment may turn on.
SPOT_GROUP = '{ spot = { instance_types = ["g5.xlarge", "g6.xlarge"], spot = "spot-preferred" } }'  # HCL
RENDERINGS: list[tuple[list[str], dict]] = [
    ([], {}),
    ([], {"worker_groups": SPOT_GROUP}),
    ([], {"gcs_store": "{ enabled = true }", "notify_emails": '["ops@example.com"]'}),  # HCL values
]


def rendered_types() -> set[str]:
    from tools.rendered import resources
    from tools.terraform_standin.render import rendered_state

    return {
        r["type"]
        for files, variables in RENDERINGS
        for r in resources(rendered_state(var_files=files, variables=variables))
    }


def policy(types: set[str] | None = None) -> dict:
    types = rendered_types() if types is None else types
    code = sorted(set(iam_scan.actions_by_role()[bucket.OPERATOR]) | set(CLI_ACTIONS))
    terraform = sorted({a for t in types for a in TERRAFORM_ACTIONS[t]} - set(code))
    statements = [{"Sid": "RayfleetCommand", "Effect": "Allow", "Action": code, "Resource": "*"}]
    statements.append({"Sid": "TerraformInfra", "Effect": "Allow", "Action": terraform, "Resource": "*"})
    return {"Version": "2012-10-17", "Statement": statements}


def main() -> int:
    json.dump(policy(), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
