"""Schema-exact stand-in providers, so that real Terraform validates and tests infra/ offline.

What it is: a Terraform provider (plugin protocol v6, served by server.py in Python through the `tf`
package's tfplugin6 bindings) installed as hashicorp/aws 5.100.0 and hashicorp/random 3.7.2 in a local
plugin mirror (install.py; `terraform init -plugin-dir .terraform-standin/plugins`). No registry, no AWS.

What it serves: each provider's schema, regenerated (schemagen.py) from the CDKTF prebuilt provider
package that HashiCorp generated from `terraform providers schema -json` of exactly that release
(requirements/terraform-schemas.txt: cdktf-cdktf-provider-aws 20.1.0, cdktf-cdktf-provider-random 12.0.1):
every resource, data source and the provider block, with attribute names, types, required / optional /
computed, nested blocks (list, set, single, max-one) and nested attributes. With it, Terraform itself
checks: argument names ("instance_typ" is refused), types, required arguments, block vs attribute syntax,
references to attributes a resource does not export, and everything Terraform evaluates (expressions,
for_each, templatefile, jsonencode, variable validations, preconditions, checks). `terraform test` with
`mock_provider` evaluates the whole root module and asserts on the values it renders.

What it cannot check (it is no AWS provider):
* no AWS API semantics: nothing is created or read; plan/apply/read outside `mock_provider` return
  placeholders ("standin-<name>", 0, false, empty), so resource values come from the configuration or
  from the tests' mock_resource / mock_data defaults, never from AWS;
* none of the provider's own validators (they are code, not schema): enum values, ARN / CIDR formats,
  ConflictsWith / ExactlyOneOf, AWS limits, IAM policy grammar;
* what the CDKTF package does not record (schemagen.py): whether an optional argument is also computed
  (decided by the provider's conventions: data-source arguments, `id`, `tags_all` and `name` beside
  `name_prefix` are; other optional resource arguments are not, so under mock_provider they stay null
  where AWS might fill them in), sensitive flags (so no "output refers to sensitive values" errors),
  deprecations, max_items other than max-one blocks (and none on the provider block), schema versions;
  the few attributes the CDKTF generator collapsed to `any` (WAFv2 rule statements, QuickSight
  definitions) are `dynamic`;
* a plan or apply without mock_provider runs, but on placeholders: an empty availability-zones list makes
  infra/'s network module fail (slice), so infra/tests mock both providers.

Render mode (TF_STANDIN_MODE=render, values.py) is the exception: plan and apply fill computed attributes
with deterministic, realistic ids, ARNs and names, and the data sources infra/ reads answer as AWS would
for account 123456789012, so a plain `terraform apply` of infra/ completes and `terraform show -json`
holds a deployment's state (render.py; the integration tests' moto stack is built from it). Still no AWS
semantics: nothing checks that what Terraform asks for would be accepted.
"""
