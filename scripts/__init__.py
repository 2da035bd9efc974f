"""Entry points and operations, by concern: local_cluster/ and recipes/ and ecs/ and deploy/ run on the
laptop (or CI); container/ runs inside the images. They use the training library and its core, never the
other way round."""
