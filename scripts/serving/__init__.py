"""`make serve`, `serve-status`, `serve-down`: a run's model as a Ray Serve application on the cluster.

    serve.py     the verbs: what to serve, checks, local cluster or ECS (python -m scripts.serving.serve)
    control.py   deploy / wait / status / shut down through the dashboard's Serve API (Ray's own client);
                 runs on the laptop for the local cluster and in a trainer task on ECS
    summary.py   Serve's details as rows: applications, deployments, replicas and their health
The application itself (what runs in the cluster) is training/serving/.
"""
