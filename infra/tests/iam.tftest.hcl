# The IAM module's roles, policy statements and key policy as Terraform renders them (mocked providers:
# account 123456789012, us-east-1, partition aws): least privilege per role, and the Ray token readable by
# the execution role only.

mock_provider "aws" {
  source = "./tests"
}

variables {
  name            = "rayfleet"
  bucket_arn      = "arn:aws:s3:::rayfleet-results-20250601"
  bucket_prefixes = ["runs/", "data/"]
  # issue 54 R1: staged data (make run's `data:`), which the deployer writes and the tasks only read
  read_only_prefixes = ["staged/"]
  control_prefix     = "cluster/"
  queue_prefix       = "queue/"
  # what the root gives for the default worker groups (module.ray.service_names: head, control, each group's)
  scaled_services  = ["rayfleet-ray-control", "rayfleet-ray-head", "rayfleet-ray-worker-ddp", "rayfleet-ray-worker-fsdp"]
  repository_arns  = ["arn:aws:ecr:us-east-1:123456789012:repository/rayfleet/ray-head", "arn:aws:ecr:us-east-1:123456789012:repository/rayfleet/trainer"]
  metric_namespace = "Rayfleet/GPU"
  # issue 54 R3: the worker groups' Auto Scaling groups by their exact names (the head's is not among them): the
  # default's two groups, ddp and fsdp
  worker_autoscaling_group_names = ["rayfleet-worker-ddp-20250601000000000000000001", "rayfleet-worker-fsdp-20250601000000000000000002"]
}

run "iam" {
  command = apply

  module {
    source = "./modules/iam"
  }

  assert {
    condition = jsonencode({
      for s in jsondecode(aws_iam_role_policy.execution.policy).Statement : s.Sid => [s.Action, s.Resource]
      }) == jsonencode({
      EcrAuth               = ["ecr:GetAuthorizationToken", "*"]
      PullOwnImages         = [["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"], var.repository_arns]
      Logs                  = [["logs:CreateLogStream", "logs:PutLogEvents"], "arn:aws:logs:us-east-1:123456789012:log-group:/rayfleet/rayfleet/*:*"]
      RayToken              = ["secretsmanager:GetSecretValue", "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/ray-auth-token-*"]
      ServeApiKey           = ["secretsmanager:GetSecretValue", "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/serve-api-key-*"]
      DecryptTokenAndImages = ["kms:Decrypt", aws_kms_key.this.arn]
    })
    error_message = "Execution role: ${aws_iam_role_policy.execution.policy}"
  }

  assert {
    condition = [
      for s in jsondecode(aws_iam_role_policy.execution.policy).Statement : s.Condition if s.Sid == "DecryptTokenAndImages"
    ] == [{ StringEquals = { "kms:ViaService" = ["secretsmanager.us-east-1.amazonaws.com", "ecr.us-east-1.amazonaws.com"] } }]
    error_message = "The execution role decrypts only through Secrets Manager and ECR."
  }

  # Ray Train's HeadBucket is s3:ListBucket with no prefix: granted for that request alone (issue 54)
  assert {
    condition = [
      for s in jsondecode(aws_iam_role_policy.task.policy).Statement : [s.Action, s.Condition] if s.Sid == "FindTheBucket"
    ] == [["s3:ListBucket", { Null = { "s3:prefix" = "true" } }]]
    error_message = "The task role may ask whether the bucket exists (HeadBucket), and list only when it names no prefix."
  }

  assert {
    condition = {
      for s in jsondecode(aws_iam_role_policy.task.policy).Statement : s.Sid => s.Resource
      } == {
      ListOwnPrefixes                = var.bucket_arn
      FindTheBucket                  = var.bucket_arn
      ReadWriteOwnPrefixes           = ["arn:aws:s3:::rayfleet-results-20250601/runs/*", "arn:aws:s3:::rayfleet-results-20250601/data/*"]
      ListReadOnlyPrefixes           = var.bucket_arn
      ReadOnlyPrefixes               = ["arn:aws:s3:::rayfleet-results-20250601/staged/*"]
      BucketKey                      = aws_kms_key.this.arn
      GpuMetrics                     = "*"
      EcsExecChannel                 = "*"
      EcsExecSessionLog              = "arn:aws:logs:us-east-1:123456789012:log-group:/rayfleet/rayfleet/*:*"
      EcsExecLogKey                  = aws_kms_key.this.arn
      RecipeSecrets                  = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/recipes/*"
      RecipeParameters               = "arn:aws:ssm:us-east-1:123456789012:parameter/rayfleet/recipes/*"
      NotifyRuns                     = "arn:aws:sns:us-east-1:123456789012:rayfleet-notifications"
      NotifyThroughTheEncryptedTopic = aws_kms_key.this.arn
    }
    error_message = "Task role: ${aws_iam_role_policy.task.policy}"
  }

  assert {
    condition = alltrue([
      for s in jsondecode(aws_iam_role_policy.task.policy).Statement :
      !strcontains(jsonencode(s.Resource), "ray-auth-token") && !contains(flatten([s.Action]), "secretsmanager:*")
    ])
    error_message = "The task role can never read the Ray token (only recipe secrets under <name>/recipes/)."
  }

  assert {
    condition = alltrue([
      for p in [aws_iam_role_policy.execution.policy, aws_iam_role_policy.task.policy] : alltrue([
        for s in jsondecode(p).Statement : s.Effect == "Allow" && alltrue([for a in flatten([s.Action]) : !endswith(a, ":*") && a != "*"])
      ])
    ])
    error_message = "No wildcard actions in the roles' policies."
  }

  assert {
    condition = (
      [for s in jsondecode(aws_iam_role_policy.task.policy).Statement : s.Condition if s.Sid == "GpuMetrics"] == [{ StringEquals = { "cloudwatch:namespace" = "Rayfleet/GPU" } }] &&
      [for s in jsondecode(aws_iam_role_policy.task.policy).Statement : s.Condition if s.Sid == "ListOwnPrefixes"] == [{ StringLike = { "s3:prefix" = ["runs/", "data/", "runs/*", "data/*"] } }]
    )
    error_message = "Metrics only into the module's namespace; listing only under the deployment's prefixes."
  }

  # issue 54 R1: the tasks read staged data (training/rayfleet/train/data/staged.py lists and gets staged/<hash>/) and
  # cannot write it: a job must not pre-stage content under a hash another run will trust. Only the deployer
  # writes staged/ (training/rayfleet/recipes/stage.py).
  assert {
    condition = jsonencode([
      for s in jsondecode(aws_iam_role_policy.task.policy).Statement : [s.Action, lookup(s, "Condition", null)] if contains(["ListReadOnlyPrefixes", "ReadOnlyPrefixes"], s.Sid)
      ]) == jsonencode([
      ["s3:ListBucket", { StringLike = { "s3:prefix" = ["staged/", "staged/*"] } }],
      ["s3:GetObject", null],
    ])
    error_message = "Task role: staged/ listed and read, nothing else: ${aws_iam_role_policy.task.policy}"
  }

  assert {
    condition = alltrue([
      for s in jsondecode(aws_iam_role_policy.task.policy).Statement : !strcontains(jsonencode(s.Resource), "/staged/") || flatten([s.Action]) == ["s3:GetObject"]
    ])
    error_message = "No statement of the task role writes or deletes under staged/."
  }

  assert {
    condition = (
      jsondecode(aws_iam_role.execution.assume_role_policy).Statement == [{
        Effect    = "Allow"
        Principal = { Service = "ecs-tasks.amazonaws.com" }
        Action    = "sts:AssumeRole"
        Condition = { StringEquals = { "aws:SourceAccount" = "123456789012" } }
      }] &&
      aws_iam_role.task.assume_role_policy == aws_iam_role.execution.assume_role_policy &&
      jsondecode(aws_iam_role.instance.assume_role_policy).Statement[0].Principal == { Service = "ec2.amazonaws.com" }
    )
    error_message = "Task roles are assumed by ECS tasks of this account only; the instance role by EC2."
  }

  # issue 15 item 1: the instance role is the ECS agent's for this cluster only, not AWS's account-wide managed
  # policy. Resource types per action from the Service Authorization Reference (Amazon ECS, Amazon ECR,
  # CloudWatch Logs); "*" only where the action has no resource type.
  assert {
    condition = jsonencode({
      for s in jsondecode(aws_iam_role_policy.instance.policy).Statement : s.Sid => [s.Action, s.Resource]
      }) == jsonencode({
      AgentOfThisCluster   = [["ecs:RegisterContainerInstance", "ecs:DeregisterContainerInstance", "ecs:SubmitAttachmentStateChanges", "ecs:SubmitContainerStateChange", "ecs:SubmitTaskStateChange"], "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"]
      AgentOfItsInstances  = [["ecs:Poll", "ecs:StartTelemetrySession", "ecs:UpdateContainerInstancesState"], "arn:aws:ecs:us-east-1:123456789012:container-instance/rayfleet/*"]
      DiscoverPollEndpoint = ["ecs:DiscoverPollEndpoint", "*"]
      EcrAuth              = ["ecr:GetAuthorizationToken", "*"]
      PullOwnImages        = [["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"], var.repository_arns]
      Logs                 = [["logs:CreateLogStream", "logs:PutLogEvents"], "arn:aws:logs:us-east-1:123456789012:log-group:/rayfleet/rayfleet/*:*"]
    })
    error_message = "Instance role: ${aws_iam_role_policy.instance.policy}"
  }

  assert {
    condition = (
      aws_iam_instance_profile.instance.role == aws_iam_role.instance.name && aws_iam_role_policy.instance.role == aws_iam_role.instance.id &&
      alltrue([for s in jsondecode(aws_iam_role_policy.instance.policy).Statement : s.Effect == "Allow" && alltrue([for a in flatten([s.Action]) : !strcontains(a, "*")])]) &&
      !contains(flatten([for s in jsondecode(aws_iam_role_policy.instance.policy).Statement : s.Action]), "ecs:CreateCluster")
    )
    error_message = "The instances get only the agent's actions, none by wildcard, and cannot create clusters."
  }

  assert {
    condition = (
      aws_kms_key.this.enable_key_rotation && aws_kms_alias.this.name == "alias/rayfleet-rayfleet" &&
      [for s in jsondecode(aws_kms_key.this.policy).Statement : s.Sid] == ["AccountAdministers", "LogsOfThisDeployment", "AlarmsAndEventsToTheNotificationsTopic", "AutoScalingVolumes", "AutoScalingVolumeGrants"] &&
      jsondecode(aws_kms_key.this.policy).Statement[0].Principal == { AWS = "arn:aws:iam::123456789012:root" } &&
      jsondecode(aws_kms_key.this.policy).Statement[1].Condition == { ArnLike = { "kms:EncryptionContext:aws:logs:arn" = "arn:aws:logs:us-east-1:123456789012:log-group:/rayfleet/rayfleet/*" } }
    )
    error_message = "Key policy: ${aws_kms_key.this.policy}"
  }

  assert {
    condition = [
      for s in jsondecode(aws_kms_key.this.policy).Statement : [s.Principal, s.Action, s.Condition] if s.Sid == "AlarmsAndEventsToTheNotificationsTopic"
      ] == [[{ Service = ["cloudwatch.amazonaws.com", "events.amazonaws.com"] }, ["kms:Decrypt", "kms:GenerateDataKey*"], { StringEquals = { "aws:SourceAccount" = "123456789012" } }]] && [
      for s in jsondecode(aws_iam_role_policy.task.policy).Statement : [s.Action, s.Condition] if s.Sid == "NotifyThroughTheEncryptedTopic"
    ] == [[["kms:GenerateDataKey*", "kms:Decrypt"], { StringEquals = { "kms:ViaService" = "sns.us-east-1.amazonaws.com" } }]]
    error_message = "Only this account's alarms and event rules, and the task role only through SNS, use the key for the notifications topic."
  }

  # issue 27 item 4: the control task's role (head snapshot, autostop) alone scales the deployment's services
  # (head, control and each worker group's), in this cluster, and alone writes cluster/ (the snapshot `make start`/`make status` trust);
  # it reads the run queue (issue 30: capacity follows the queue) and writes nothing there; it starts the
  # trainers of runs waiting for a driver slot (the trainer's definitions only, passing the trainer's roles only).
  assert {
    condition = (
      jsonencode({ for s in jsondecode(aws_iam_role_policy.control.policy).Statement : s.Sid => [s.Action, s.Resource, lookup(s, "Condition", null)] }) == jsonencode({
        ScaleOwnServices = [["ecs:DescribeServices", "ecs:UpdateService"], [
          "arn:aws:ecs:us-east-1:123456789012:service/rayfleet/rayfleet-ray-control",
          "arn:aws:ecs:us-east-1:123456789012:service/rayfleet/rayfleet-ray-head",
          "arn:aws:ecs:us-east-1:123456789012:service/rayfleet/rayfleet-ray-worker-ddp",
          "arn:aws:ecs:us-east-1:123456789012:service/rayfleet/rayfleet-ray-worker-fsdp",
        ], { ArnEquals = { "ecs:cluster" = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet" } }]
        FindOwnContainerInstance  = ["ecs:ListContainerInstances", "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet", null]
        DrainOwnContainerInstance = [["ecs:DescribeContainerInstances", "ecs:UpdateContainerInstancesState"], "arn:aws:ecs:us-east-1:123456789012:container-instance/rayfleet/*", null]
        ReplaceBadInstance = ["autoscaling:SetInstanceHealth", [
          "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/rayfleet-worker-ddp-20250601000000000000000001",
          "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/rayfleet-worker-fsdp-20250601000000000000000002",
        ], null]
        SeeOwnTrainerTasks   = ["ecs:ListTasks", "*", { ArnEquals = { "ecs:cluster" = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet" } }]
        SeeOwnWorkerTasks    = ["ecs:DescribeTasks", "arn:aws:ecs:us-east-1:123456789012:task/rayfleet/*", { ArnEquals = { "ecs:cluster" = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet" } }]
        SeeWorkerAddresses   = ["ec2:DescribeInstances", "*", null]
        ListTheQueue         = ["s3:ListBucket", "arn:aws:s3:::rayfleet-results-20250601", { StringLike = { "s3:prefix" = ["queue/", "queue/*"] } }]
        ReadTheQueue         = ["s3:GetObject", "arn:aws:s3:::rayfleet-results-20250601/queue/*", null]
        StartWaitingTrainers = ["ecs:RunTask", "arn:aws:ecs:us-east-1:123456789012:task-definition/rayfleet-trainer:*", { ArnEquals = { "ecs:cluster" = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet" } }]
        TagStartedTrainers   = ["ecs:TagResource", "arn:aws:ecs:us-east-1:123456789012:task/rayfleet/*", { StringEquals = { "ecs:CreateAction" = "RunTask" } }]
        PassTrainerRoles     = ["iam:PassRole", [aws_iam_role.task.arn, aws_iam_role.execution.arn], { StringEquals = { "iam:PassedToService" = "ecs-tasks.amazonaws.com" } }]
        MoveStartedLaunches  = ["s3:DeleteObject", "arn:aws:s3:::rayfleet-results-20250601/cluster/launches/*", null]
        ListWaitingLaunches  = ["s3:ListBucket", "arn:aws:s3:::rayfleet-results-20250601", { StringLike = { "s3:prefix" = ["cluster/launches/*"] } }]
        WriteTheSnapshot     = [["s3:GetObject", "s3:PutObject"], "arn:aws:s3:::rayfleet-results-20250601/cluster/*", null]
        BucketKey            = [["kms:Decrypt", "kms:GenerateDataKey"], aws_kms_key.this.arn, { StringEquals = { "kms:ViaService" = "s3.us-east-1.amazonaws.com" } }]
      }) &&
      aws_iam_role_policy.control.role == aws_iam_role.control.id && aws_iam_role.control.assume_role_policy == aws_iam_role.task.assume_role_policy
    )
    error_message = "Control role: ${aws_iam_role_policy.control.policy}"
  }

  # issue 54 R3: SetInstanceHealth names the worker groups' Auto Scaling groups exactly, every group's. A name pattern
  # (autoScalingGroupName/<name>-*) also matched every group of another deployment named <name>-x, and this
  # deployment's head group.
  assert {
    condition = alltrue(flatten([
      for s in jsondecode(aws_iam_role_policy.control.policy).Statement : [
        for r in flatten([s.Resource]) : !strcontains(r, "*:autoScalingGroupName/rayfleet-*") && !endswith(r, "-*") && !strcontains(r, "-head")
      ] if s.Sid == "ReplaceBadInstance"
    ]))
    error_message = "ReplaceBadInstance: ${aws_iam_role_policy.control.policy}"
  }

  assert {
    condition = [
      for s in jsondecode(aws_kms_key.this.policy).Statement : [s.Action, s.Condition] if s.Sid == "AutoScalingVolumeGrants"
    ] == [["kms:CreateGrant", { Bool = { "kms:GrantIsForAWSResource" = "true" } }]]
    error_message = "Auto Scaling's role creates grants on the key only for AWS resources (the instances' volumes)."
  }

  assert {
    condition = alltrue([
      for s in jsondecode(aws_iam_role_policy.task.policy).Statement : !anytrue([for a in flatten([s.Action]) : startswith(a, "ecs:")])
    ])
    error_message = "The task role (head, workers, trainers: every job) has no ECS rights: only the control role may scale the services."
  }
}
