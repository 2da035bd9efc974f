"""The local Ray cluster (runs on the laptop): a head that trains nothing and N worker nodes, token auth on."""
