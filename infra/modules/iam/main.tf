locals {
  tags = merge(var.tags, { Component = "iam" })
  assume = { for svc in ["ecs-tasks", "ec2"] : svc => jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "${svc}.amazonaws.com" }
      Action    = "sts:AssumeRole"
      Condition = svc == "ecs-tasks" ? { StringEquals = { "aws:SourceAccount" = local.account } } : null
    }]
  }) }
  prefix_arns = [for p in var.bucket_prefixes : "${var.bucket_arn}/${p}*"]
  # Read-only prefixes (staged/: make run's `data:`): the deployer writes them, the tasks only list and read.
  # A job that could write there could pre-stage content under a hash another run trusts.
  read_only_statements = [for s in [
    {
      Sid       = "ListReadOnlyPrefixes"
      Effect    = "Allow"
      Action    = "s3:ListBucket"
      Resource  = var.bucket_arn
      Condition = { StringLike = { "s3:prefix" = concat(var.read_only_prefixes, [for p in var.read_only_prefixes : "${p}*"]) } }
    },
    {
      Sid      = "ReadOnlyPrefixes"
      Effect   = "Allow"
      Action   = "s3:GetObject"
      Resource = [for p in var.read_only_prefixes : "${var.bucket_arn}/${p}*"]
    },
  ] : s if length(var.read_only_prefixes) > 0]
  # The worker groups' Auto Scaling groups by their exact names: a name pattern (<name>-*) would also match
  # every group of another deployment named <name>-x, and the head's group.
  replace_statements = [for s in [{
    # A worker whose GPU went bad drains its Ray node (training/rayfleet/node/control/suspect.py); the control task marks
    # that instance unhealthy and its group replaces it. No change of size or configuration.
    Sid      = "ReplaceBadInstance"
    Effect   = "Allow"
    Action   = "autoscaling:SetInstanceHealth"
    Resource = [for n in var.worker_autoscaling_group_names : "arn:${local.partition}:autoscaling:${local.region}:${local.account}:autoScalingGroup:*:autoScalingGroupName/${n}"]
  }] : s if length(var.worker_autoscaling_group_names) > 0]
}

# Execution role: what ECS itself does before the containers start.
resource "aws_iam_role" "execution" {
  name               = "${var.name}-task-execution"
  assume_role_policy = local.assume["ecs-tasks"]
  tags               = local.tags
}

resource "aws_iam_role_policy" "execution" {
  name = "pull-log-token"
  role = aws_iam_role.execution.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat([
      { Sid = "EcrAuth", Effect = "Allow", Action = "ecr:GetAuthorizationToken", Resource = "*" },
      {
        Sid      = "PullOwnImages"
        Effect   = "Allow"
        Action   = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"]
        Resource = var.repository_arns
      },
      { Sid = "Logs", Effect = "Allow", Action = ["logs:CreateLogStream", "logs:PutLogEvents"], Resource = "${local.log_arn}:*" },
      {
        Sid      = "RayToken"
        Effect   = "Allow"
        Action   = "secretsmanager:GetSecretValue"
        Resource = "arn:${local.partition}:secretsmanager:${local.region}:${local.account}:secret:${var.name}/ray-auth-token-*"
      },
      {
        Sid      = "ServeApiKey"
        Effect   = "Allow"
        Action   = "secretsmanager:GetSecretValue"
        Resource = "arn:${local.partition}:secretsmanager:${local.region}:${local.account}:secret:${var.name}/serve-api-key-*"
      },
      {
        Sid       = "DecryptTokenAndImages"
        Effect    = "Allow"
        Action    = "kms:Decrypt"
        Resource  = aws_kms_key.this.arn
        Condition = { StringEquals = { "kms:ViaService" = ["secretsmanager.${local.region}.amazonaws.com", "ecr.${local.region}.amazonaws.com"] } }
      },
      ], var.serve_tls_secret_arn == null ? [] : [{
        # make serve's TLS (serve.tls_secret_arn): the operator's certificate, for the serve-gate container
        Sid      = "ServeTlsCertificate"
        Effect   = "Allow"
        Action   = "secretsmanager:GetSecretValue"
        Resource = var.serve_tls_secret_arn
    }])
  })
}

# Task role: what the head, workers, trainer and sidecars do at run time, and so what any job can do. No
# account-wide read, no write outside its prefixes (runs/, data/, queue/), read only under read_only_prefixes
# (staged/), no change to the deployment. The bucket's layout and who uses each prefix: training/rayfleet/core/bucket.py.
resource "aws_iam_role" "task" {
  name               = "${var.name}-task"
  assume_role_policy = local.assume["ecs-tasks"]
  tags               = local.tags
}

resource "aws_iam_role_policy" "task" {
  name = "results-metrics-exec"
  role = aws_iam_role.task.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat([
      {
        Sid       = "ListOwnPrefixes"
        Effect    = "Allow"
        Action    = "s3:ListBucket"
        Resource  = var.bucket_arn
        Condition = { StringLike = { "s3:prefix" = concat(var.bucket_prefixes, [for p in var.bucket_prefixes : "${p}*"]) } }
      },
      {
        # Ray Train checks its storage with S3's HeadBucket (pyarrow's create_dir), which AWS authorizes as
        # s3:ListBucket with no prefix: without this every run's controller is refused. The same grant lets a
        # job list the names of every key (never read one) when it asks for no prefix.
        Sid       = "FindTheBucket"
        Effect    = "Allow"
        Action    = "s3:ListBucket"
        Resource  = var.bucket_arn
        Condition = { Null = { "s3:prefix" = "true" } }
      },
      {
        Sid      = "ReadWriteOwnPrefixes"
        Effect   = "Allow"
        Action   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]
        Resource = local.prefix_arns
      },
      {
        Sid       = "BucketKey"
        Effect    = "Allow"
        Action    = ["kms:Decrypt", "kms:GenerateDataKey"]
        Resource  = aws_kms_key.this.arn
        Condition = { StringEquals = { "kms:ViaService" = "s3.${local.region}.amazonaws.com" } }
      },
      {
        Sid      = "NotifyRuns"
        Effect   = "Allow"
        Action   = "sns:Publish"
        Resource = local.notifications_topic_arn
      },
      {
        Sid       = "NotifyThroughTheEncryptedTopic"
        Effect    = "Allow"
        Action    = ["kms:GenerateDataKey*", "kms:Decrypt"]
        Resource  = aws_kms_key.this.arn
        Condition = { StringEquals = { "kms:ViaService" = "sns.${local.region}.amazonaws.com" } }
      },
      {
        Sid       = "GpuMetrics"
        Effect    = "Allow"
        Action    = "cloudwatch:PutMetricData"
        Resource  = "*" # PutMetricData has no resource type; the namespace condition is the limit
        Condition = { StringEquals = { "cloudwatch:namespace" = var.metric_namespace } }
      },
      {
        Sid      = "EcsExecChannel"
        Effect   = "Allow"
        Action   = ["ssmmessages:CreateControlChannel", "ssmmessages:CreateDataChannel", "ssmmessages:OpenControlChannel", "ssmmessages:OpenDataChannel"]
        Resource = "*" # these actions have no resource type
      },
      {
        Sid      = "EcsExecSessionLog"
        Effect   = "Allow"
        Action   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogGroups", "logs:DescribeLogStreams"]
        Resource = "${local.log_arn}:*"
      },
      { Sid = "EcsExecLogKey", Effect = "Allow", Action = ["kms:Decrypt", "kms:GenerateDataKey"], Resource = aws_kms_key.this.arn },
      {
        # make run: a recipe's `secretsmanager:` and `ssm:` env references, read by the trainer at submit time.
        # Only under <name>/recipes/, which the Ray token (<name>/ray-auth-token-*) is not.
        Sid      = "RecipeSecrets"
        Effect   = "Allow"
        Action   = "secretsmanager:GetSecretValue"
        Resource = "arn:${local.partition}:secretsmanager:${local.region}:${local.account}:secret:${var.name}/recipes/*"
      },
      {
        Sid      = "RecipeParameters"
        Effect   = "Allow"
        Action   = "ssm:GetParameter"
        Resource = "arn:${local.partition}:ssm:${local.region}:${local.account}:parameter/${var.name}/recipes/*"
      },
    ], local.read_only_statements)
  })
}

# The control task's role (the head's snapshot and autostop: training/rayfleet/node/control/head_snapshot.py). No job can
# use it: the control task runs no Ray node, so nothing Ray schedules lands there, and every task a job can
# reach (head, workers, trainer) has the task role above, which can neither change the deployment's size
# nor write cluster/, where `make start` and `make status` read the head's snapshot.
resource "aws_iam_role" "control" {
  name               = "${var.name}-control-task"
  assume_role_policy = local.assume["ecs-tasks"]
  tags               = local.tags
}

resource "aws_iam_role_policy" "control" {
  name = "snapshot-autostop"
  role = aws_iam_role.control.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat([
      {
        # Autostop scales these to 0, nothing else: no other service, and (ECS has no condition on the new
        # size or network) only this role may call it.
        Sid       = "ScaleOwnServices"
        Effect    = "Allow"
        Action    = ["ecs:DescribeServices", "ecs:UpdateService"]
        Resource  = [for s in var.scaled_services : "arn:${local.partition}:ecs:${local.region}:${local.account}:service/${var.name}/${s}"]
        Condition = { ArnEquals = { "ecs:cluster" = local.cluster_arn } }
      },
      {
        # A worker whose GPU went bad drains its Ray node, naming its instance (training/rayfleet/node/control/suspect.py); this
        # task then takes that instance out: ECS places no task there and the Auto Scaling group replaces it.
        # Only instances of this deployment; no change of size or configuration.
        Sid      = "FindOwnContainerInstance"
        Effect   = "Allow"
        Action   = "ecs:ListContainerInstances"
        Resource = local.cluster_arn
      },
      {
        Sid      = "DrainOwnContainerInstance"
        Effect   = "Allow"
        Action   = ["ecs:DescribeContainerInstances", "ecs:UpdateContainerInstancesState"]
        Resource = "arn:${local.partition}:ecs:${local.region}:${local.account}:container-instance/${var.name}/*"
      },
      ], local.replace_statements, [
      {
        # Read-only: a trainer task still pulling its image is activity too. ListTasks names no task; the
        # condition keeps it to this cluster.
        Sid       = "SeeOwnTrainerTasks"
        Effect    = "Allow"
        Action    = "ecs:ListTasks"
        Resource  = "*"
        Condition = { ArnEquals = { "ecs:cluster" = local.cluster_arn } }
      },
      {
        # A suspect is taken out only when ECS says it is the instance behind the dead node's own address
        # (training/rayfleet/node/control/suspect.py worker_instance_at): the worker services' tasks and, in host networking,
        # their instances' addresses. Read-only; DescribeInstances has no resource type.
        Sid       = "SeeOwnWorkerTasks"
        Effect    = "Allow"
        Action    = "ecs:DescribeTasks"
        Resource  = "arn:${local.partition}:ecs:${local.region}:${local.account}:task/${var.name}/*"
        Condition = { ArnEquals = { "ecs:cluster" = local.cluster_arn } }
      },
      {
        Sid      = "SeeWorkerAddresses"
        Effect   = "Allow"
        Action   = "ec2:DescribeInstances"
        Resource = "*"
      },
      {
        # Capacity follows the queue (training/rayfleet/node/control/queue_scaling.py): the queue's entries, read only.
        Sid       = "ListTheQueue"
        Effect    = "Allow"
        Action    = "s3:ListBucket"
        Resource  = var.bucket_arn
        Condition = { StringLike = { "s3:prefix" = [var.queue_prefix, "${var.queue_prefix}*"] } }
      },
      {
        Sid      = "ReadTheQueue"
        Effect   = "Allow"
        Action   = "s3:GetObject"
        Resource = "${var.bucket_arn}/${var.queue_prefix}*"
      },
      {
        # Runs waiting for a driver slot (training/rayfleet/node/control/driver_dispatch.py): the RunTask `make run` kept under
        # cluster/launches/, which only the deployer and this role write, sent again once the head instance
        # has a slot. Only the trainer's task definitions (a recipe's image is a revision of the same family),
        # only on this cluster, and only this deployment's two roles passed to ECS tasks: no other role.
        Sid       = "StartWaitingTrainers"
        Effect    = "Allow"
        Action    = "ecs:RunTask"
        Resource  = "arn:${local.partition}:ecs:${local.region}:${local.account}:task-definition/${var.name}-trainer:*"
        Condition = { ArnEquals = { "ecs:cluster" = local.cluster_arn } }
      },
      {
        Sid       = "TagStartedTrainers"
        Effect    = "Allow"
        Action    = "ecs:TagResource"
        Resource  = "arn:${local.partition}:ecs:${local.region}:${local.account}:task/${var.name}/*"
        Condition = { StringEquals = { "ecs:CreateAction" = "RunTask" } }
      },
      {
        Sid       = "PassTrainerRoles"
        Effect    = "Allow"
        Action    = "iam:PassRole"
        Resource  = [aws_iam_role.task.arn, aws_iam_role.execution.arn]
        Condition = { StringEquals = { "iam:PassedToService" = "ecs-tasks.amazonaws.com" } }
      },
      {
        # A placed launch moves to cluster/launches/started/: each round then reads only those that wait.
        Sid      = "MoveStartedLaunches"
        Effect   = "Allow"
        Action   = "s3:DeleteObject"
        Resource = "${var.bucket_arn}/${var.control_prefix}launches/*"
      },
      {
        Sid       = "ListWaitingLaunches"
        Effect    = "Allow"
        Action    = "s3:ListBucket"
        Resource  = var.bucket_arn
        Condition = { StringLike = { "s3:prefix" = ["${var.control_prefix}launches/*"] } }
      },
      {
        Sid      = "WriteTheSnapshot"
        Effect   = "Allow"
        Action   = ["s3:GetObject", "s3:PutObject"]
        Resource = "${var.bucket_arn}/${var.control_prefix}*"
      },
      {
        Sid       = "BucketKey"
        Effect    = "Allow"
        Action    = ["kms:Decrypt", "kms:GenerateDataKey"]
        Resource  = aws_kms_key.this.arn
        Condition = { StringEquals = { "kms:ViaService" = "s3.${local.region}.amazonaws.com" } }
      },
    ])
  })
}

# Instance role: the ECS agent of this deployment's cluster only. AWS's AmazonEC2ContainerServiceforEC2Role
# grants the same actions on "*" (every cluster's container instances, every repository and log group of
# the account); here each action names this deployment's resources wherever the Service Authorization
# Reference gives it a resource type. Left out: ecs:CreateCluster (the cluster exists before any instance),
# ec2:DescribeTags and ecs:TagResource (no ECS_CONTAINER_INSTANCE_PROPAGATE_TAGS_FROM / instance tags here).
# No container can use this role: IMDS is closed to them (infra/modules/cluster/user_data.sh.tftpl).
resource "aws_iam_role" "instance" {
  name               = "${var.name}-instance"
  assume_role_policy = local.assume["ec2"]
  tags               = local.tags
}

resource "aws_iam_role_policy" "instance" {
  name = "ecs-agent"
  role = aws_iam_role.instance.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        # resource type: cluster
        Sid      = "AgentOfThisCluster"
        Effect   = "Allow"
        Action   = ["ecs:RegisterContainerInstance", "ecs:DeregisterContainerInstance", "ecs:SubmitAttachmentStateChanges", "ecs:SubmitContainerStateChange", "ecs:SubmitTaskStateChange"]
        Resource = local.cluster_arn
      },
      {
        # resource type: container-instance, whose ARN names its cluster (UpdateContainerInstancesState: Spot draining)
        Sid      = "AgentOfItsInstances"
        Effect   = "Allow"
        Action   = ["ecs:Poll", "ecs:StartTelemetrySession", "ecs:UpdateContainerInstancesState"]
        Resource = "arn:${local.partition}:ecs:${local.region}:${local.account}:container-instance/${var.name}/*"
      },
      { Sid = "DiscoverPollEndpoint", Effect = "Allow", Action = "ecs:DiscoverPollEndpoint", Resource = "*" }, # no resource type
      { Sid = "EcrAuth", Effect = "Allow", Action = "ecr:GetAuthorizationToken", Resource = "*" },             # no resource type
      {
        # Tasks pull with the execution role; the agent uses these only for a task without one.
        Sid      = "PullOwnImages"
        Effect   = "Allow"
        Action   = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"]
        Resource = var.repository_arns
      },
      { Sid = "Logs", Effect = "Allow", Action = ["logs:CreateLogStream", "logs:PutLogEvents"], Resource = "${local.log_arn}:*" },
    ]
  })
}

resource "aws_iam_instance_profile" "instance" {
  name = "${var.name}-instance"
  role = aws_iam_role.instance.name
  tags = local.tags
}
