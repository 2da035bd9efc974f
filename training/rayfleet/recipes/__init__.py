"""Recipes: the schema, code packaging, submission through Ray's Jobs API, the run record; the laptop-side
`run` verb and the driver that runs inside the trainer task on ECS."""
