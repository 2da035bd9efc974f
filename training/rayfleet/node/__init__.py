"""Code that runs inside the images on ECS: the node entry point (ray_node) and the head-side snapshot."""
